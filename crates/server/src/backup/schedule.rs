//! Scheduled backups: `[backup]` of berth.toml.
//!
//! ```toml
//! [backup]
//! dir = "/var/backups/berth"  # absent: no scheduled backups
//! interval_s = 86400          # a box is backed up when its newest backup is this old
//! keep = 7                    # the newest backups kept of each box
//! ```
//!
//! Each box of this host gets `<dir>/<box id>/<name>-<UTC time>.tar.zst`, the archive
//! `berth backup` writes. A box whose volume, memory history and settings have not changed
//! since its newest backup is not backed up again. A file is written as `.partial`,
//! synced, then renamed: a file without that suffix is whole. A deleted box's backups
//! stay: outliving the box is what they are for. Directories are 0700 and files 0600: a
//! backup holds all of a box.

use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use berth_runtime::{error_chain, volume_image};
use berth_store::{BoxRecord, BoxState};

use super::config::BackupHostConfig;
use crate::ctx::Ctx;

const SUFFIX: &str = ".tar.zst";
const PARTIAL: &str = ".partial";

/// Backs up this host's boxes as `[backup]` says; `None` without a `dir`.
pub fn spawn(ctx: Ctx, config: &BackupHostConfig) -> Option<tokio::task::JoinHandle<()>> {
    let dir = config.dir.clone()?;
    let every = Duration::from_secs(config.interval_s);
    let keep = config.keep as usize;
    tracing::info!(dir = %dir.display(), interval_s = config.interval_s, keep, "scheduled backups on");
    Some(tokio::spawn(async move {
        // Look a few times per interval, so a box is backed up within 1.25 intervals.
        let tick = (every / 4).max(Duration::from_secs(1));
        loop {
            let records = match ctx.store.list_boxes_on_node(ctx.role.node_scope()) {
                Ok(records) => records,
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "cannot list boxes to back up");
                    Vec::new()
                }
            };
            for record in records.iter().filter(|r| r.state != BoxState::Deleted) {
                let box_dir = dir.join(record.id.to_string());
                if !due(&ctx, record, &box_dir, every).await {
                    continue;
                }
                match back_up(&ctx, record, &box_dir).await {
                    Ok(path) => {
                        tracing::info!(box_id = %record.id, path = %path.display(), "scheduled backup written");
                        prune(&box_dir, keep);
                    }
                    Err(e) => {
                        tracing::warn!(box_id = %record.id, error = %e, "scheduled backup failed; the next look retries it")
                    }
                }
            }
            tokio::time::sleep(tick).await;
        }
    }))
}

/// Whether the box has no backup, or its newest is `every` old and the box changed since.
async fn due(ctx: &Ctx, record: &BoxRecord, box_dir: &Path, every: Duration) -> bool {
    let Some((_, newest)) = backups(box_dir).pop() else {
        return true;
    };
    if SystemTime::now()
        .duration_since(newest)
        .map_or(true, |age| age < every)
    {
        return false;
    }
    // The cheap looks first: the memory history is read only when they find nothing.
    let image_written = std::fs::metadata(volume_image(&ctx.data_dir, &record.id))
        .and_then(|m| m.modified())
        .is_ok_and(|at| at >= newest);
    if image_written || SystemTime::from(record.updated_at) >= newest {
        return true;
    }
    ctx.memory
        .history
        .latest(&record.id.to_string())
        .await
        .ok()
        .flatten()
        .and_then(|s| {
            time::OffsetDateTime::parse(&s.taken_at, &time::format_description::well_known::Rfc3339)
                .ok()
        })
        .is_some_and(|at| SystemTime::from(at) >= newest)
}

/// Writes one backup of `record` into `box_dir`; its path.
async fn back_up(ctx: &Ctx, record: &BoxRecord, box_dir: &Path) -> Result<PathBuf, String> {
    // A backup holds all of a box: for the daemon's user alone.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(box_dir)
        .map_err(|e| format!("cannot create {}: {e}", box_dir.display()))?;
    let path = box_dir.join(super::file_name(record));
    let partial = PathBuf::from(format!("{}{PARTIAL}", path.display()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&partial)
        .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
    // The file's time is when the box was held still for it, so a change made while it
    // streamed counts as one for the next.
    let began = SystemTime::now();
    let written = async {
        let task = super::start(ctx, &record.id, std::io::BufWriter::new(file))
            .await
            .map_err(|e| error_chain(&e))?;
        task.await
            .map_err(|e| e.to_string())?
            .map_err(|e| error_chain(&e))?;
        std::fs::File::options()
            .write(true)
            .open(&partial)
            .and_then(|f| {
                f.set_modified(began)?;
                f.sync_all()
            })
            .map_err(|e| format!("cannot sync {}: {e}", partial.display()))?;
        std::fs::rename(&partial, &path)
            .map_err(|e| format!("cannot rename {}: {e}", partial.display()))
    };
    match written.await {
        Ok(()) => Ok(path),
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            Err(e)
        }
    }
}

/// The box's whole backups, oldest first, with their times.
fn backups(box_dir: &Path) -> Vec<(PathBuf, SystemTime)> {
    let Ok(entries) = std::fs::read_dir(box_dir) else {
        return Vec::new();
    };
    let mut found: Vec<(PathBuf, SystemTime)> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(SUFFIX))
        .filter_map(|e| {
            let at = e.metadata().ok()?.modified().ok()?;
            Some((e.path(), at))
        })
        .collect();
    found.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    found
}

/// Deletes all but the newest `keep` backups.
fn prune(box_dir: &Path, keep: usize) {
    let all = backups(box_dir);
    let doomed = all.len().saturating_sub(keep);
    for (path, _) in all.into_iter().take(doomed) {
        match std::fs::remove_file(&path) {
            Ok(()) => tracing::info!(path = %path.display(), "old scheduled backup removed"),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove an old scheduled backup")
            }
        }
    }
}
