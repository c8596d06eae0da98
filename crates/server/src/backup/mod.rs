//! Backups of whole boxes (`berth backup`, `berth restore`): one file that holds a box's
//! volume, its memory history and what it is made of (`format.rs`), and a restore that
//! makes a new box of it, whole or not at all, on any runtime.
//!
//! A backup is consistent: the box's volume is staged (a reflink or a copy of its data
//! extents, as a durable copy's) while the lifecycle holds the box still, frozen or
//! paused if it runs, then streamed with nothing held. The memory history is read under
//! an upload marker, so no GC sweeps it meanwhile. A restore reads the archive into a
//! directory of its own and checks all of it before it creates anything (`read.rs`);
//! the box is then created, its volume moved into place and its history imported under
//! the lifecycle lock, and anything that fails removes the box again.
//!
//! Scheduled backups (`[backup]` in `berth.toml`) write the same files to a directory
//! (`schedule.rs`).

pub mod config;
pub mod error;
pub mod format;
mod hashing;
mod read;
pub mod restore;
pub mod schedule;
mod write;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use berth_protocol::BoxId;
use berth_runtime::volume_image;
use berth_store::BoxRecord;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::copy::with_volume_still;
use crate::lifecycle::detached::detached;
use crate::lifecycle::transition::{Kind, Transition};
pub use error::BackupError;
use format::{BoxSpec, Header, FORMAT, VERSION};
pub use write::Written;

/// Where a backup's staged volume waits while it streams, under the data dir.
const STAGING_DIR: &str = "backups/staging";
/// Where an archive being restored is read into and checked.
const INCOMING_DIR: &str = "backups/incoming";

/// Removes what backups and restores that a daemon before this one did not finish left
/// in the data dir. Called at start, before anything else can back up.
pub fn clean(data_dir: &Path) {
    for dir in [STAGING_DIR, INCOMING_DIR] {
        let dir = data_dir.join(dir);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an unfinished backup's files");
            }
        }
    }
}

/// A file or directory under the data dir that is removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    /// A new name under `<data>/<dir>/` (the directory made, mode 0700).
    fn new(ctx: &Ctx, dir: &str, stem: &str) -> Result<Scratch, BackupError> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = ctx.data_dir.join(dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(BackupError::io("create", &dir))?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Ok(Scratch(dir.join(format!("{stem}.{nanos}"))))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let removed = if self.0.is_dir() {
            std::fs::remove_dir_all(&self.0)
        } else {
            std::fs::remove_file(&self.0)
        };
        if let Err(e) = removed {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.0.display(), error = %e, "cannot remove a backup's scratch file");
            }
        }
    }
}

/// The file name a backup of `record` taken now is offered under.
pub fn file_name(record: &BoxRecord) -> String {
    let now = time::OffsetDateTime::now_utc();
    format!(
        "{}-{:04}{:02}{:02}T{:02}{:02}{:02}Z.tar.zst",
        record.name,
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

/// Starts a backup of the box `id` into `out`: stages its volume with the box held still,
/// then writes the archive on a thread of its own, whose result the handle gives.
pub async fn start(
    ctx: &Ctx,
    id: &BoxId,
    out: impl Write + Send + 'static,
) -> Result<tokio::task::JoinHandle<Result<Written, BackupError>>, OpError> {
    let staged = Scratch::new(ctx, STAGING_DIR, &id.to_string()).map_err(OpError::from)?;
    let (record, has_volume) = stage(ctx, id, &staged.0).await?;
    let history = ctx
        .memory
        .history
        .export(&id.to_string())
        .await
        .map_err(OpError::MemoryHistory)?;
    let volume = if has_volume {
        let file = File::open(&staged.0)
            .map_err(|e| OpError::from(BackupError::io("open", &staged.0)(e)))?;
        let map = write::volume_map(&file, &staged.0)?;
        Some((file, map))
    } else {
        None
    };
    let tenant = ctx
        .store
        .find_tenant(&record.tenant_id.to_string())?
        .map_or_else(|| record.tenant_id.to_string(), |t| t.name);
    let header = Header {
        format: FORMAT.to_owned(),
        version: VERSION,
        created_at: crate::durable::rfc3339(crate::durable::unix_now()),
        berth_version: env!("CARGO_PKG_VERSION").to_owned(),
        box_id: record.id.to_string(),
        box_name: record.name.clone(),
        tenant,
        volume_size: volume.as_ref().map_or(0, |(_, map)| map.size),
        volume_bytes: volume.as_ref().map_or(0, |(_, map)| map.data_bytes()),
        history_bytes: history.trees.values().map(|t| t.len() as u64).sum::<u64>()
            + history.blobs.values().sum::<u64>(),
    };
    let source = write::Source {
        header,
        spec: spec_of(&record),
        volume,
        history,
    };
    let runtime = tokio::runtime::Handle::current();
    let box_id = record.id.clone();
    Ok(tokio::task::spawn_blocking(move || {
        let _staged = staged;
        let began = std::time::Instant::now();
        let (written, history) = write::write(source, out, &runtime)?;
        runtime.block_on(history.finish())?;
        tracing::info!(box_id = %box_id, volume_bytes = written.volume_bytes, snapshots = written.snapshots, ms = began.elapsed().as_millis() as u64, "box backed up");
        Ok(written)
    }))
}

/// Stages the box's volume image at `to`, the box held still; its row, and whether it
/// has a volume (a box never started has none).
async fn stage(ctx: &Ctx, id: &BoxId, to: &Path) -> Result<(BoxRecord, bool), OpError> {
    let (ctx, id, to) = (ctx.clone(), id.clone(), to.to_owned());
    detached(&id.clone(), async move {
        let t = Transition::begin(&ctx, &id, Kind::Backup).await?;
        let record = t.record().clone();
        let image = volume_image(&ctx.data_dir, &id);
        if !image.exists() {
            return Ok((record, false));
        }
        let began = std::time::Instant::now();
        let (from, dest) = (image.clone(), to.clone());
        let copy = async move {
            tokio::task::spawn_blocking(move || crate::durable::stage::stage(&from, &dest)).await
        };
        let staged = with_volume_still(&t, copy)
            .await?
            .ok_or_else(|| BackupError::CannotHoldStill {
                name: record.name.clone(),
            })?;
        staged
            .map_err(BackupError::Worker)?
            .map_err(BackupError::io("stage a copy of the volume at", &to))?;
        tracing::info!(box_id = %id, staged_ms = began.elapsed().as_millis() as u64, "volume staged for a backup");
        Ok((record, true))
    })
    .await
}

/// What a restore needs to make the box again.
fn spec_of(record: &BoxRecord) -> BoxSpec {
    let limits = record.next_limits();
    BoxSpec {
        name: record.name.clone(),
        template: record.template.clone(),
        runtime: record.runtime.clone(),
        memory_mib: limits.memory_mib,
        pids: limits.pids,
        cpus: limits.cpus,
        pause_after_s: record.pause_after_s,
        snapshot_after_s: record.snapshot_after_s,
        stop_after_s: record.stop_after_s,
        auto_resume: record.auto_resume,
        egress: record
            .egress
            .as_deref()
            .and_then(|json| serde_json::from_str(json).ok()),
        disk_mib: record.disk_mib,
        labels: record.labels.clone(),
        env: record.env.clone(),
    }
}
