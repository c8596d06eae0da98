//! A box's volume put back from a durable copy (`POST /v1/boxes/{ref}/restore`, `berth box
//! restore NAME --from-copy`): for a volume image lost or damaged on its host. The box must
//! be stopped; its image is replaced whole or not at all, marked as written from outside
//! (so its next start checks it in full before the host mounts it), and the restore is an
//! event on the box saying which copy and what it may have lost.

use berth_chunks::ChunkError;
use berth_protocol::BoxId;
use berth_runtime::{volume_image, volume_image::mark_guest_written};
use berth_store::{BoxRecord, BoxState, VolumeRestored};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::ctx::Ctx;
use crate::durable::error::DurableError;
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::lifecycle::transition::{runtime_error, Kind, Transition};

/// Restores the stopped box `id`'s volume from its copy `generation` (else its newest);
/// `reason` goes on the event (`copy`, `failover`).
pub(super) async fn restore_from_copy(
    ctx: &Ctx,
    id: &BoxId,
    generation: Option<u64>,
) -> Result<BoxRecord, OpError> {
    let (ctx, id) = (ctx.clone(), id.clone());
    detached(&id.clone(), async move {
        let t = Transition::begin(&ctx, &id, Kind::Restore).await?;
        let record = t.record().clone();
        if !matches!(record.state, BoxState::Stopped | BoxState::Failed) {
            return Err(OpError::RestoreWhileAwake {
                name: record.name,
                state: record.state,
            });
        }
        restore_held(&t, generation, "copy").await?;
        t.finish()
    })
    .await
}

/// Restores the volume of the box held by `t`, on which nothing runs.
pub(crate) async fn restore_held(
    t: &Transition<'_>,
    generation: Option<u64>,
    reason: &str,
) -> Result<(), OpError> {
    let ctx = t.ctx();
    let record = t.record();
    let durable = ctx.durable.as_ref().ok_or(OpError::NoDurableCopies)?;
    let no_copy = || OpError::NoDurableCopy {
        name: record.name.clone(),
        generation,
    };
    let manifest = match durable.manifest_of(record, generation).await {
        Ok(Some(manifest)) => manifest,
        Ok(None) | Err(DurableError::Chunks(ChunkError::NoManifest { .. })) => {
            return Err(no_copy())
        }
        Err(source) => return Err(restore_error(record, source)),
    };
    let image = volume_image(&ctx.data_dir, &record.id);
    durable
        .restore(&manifest, &image)
        .await
        .map_err(|source| restore_error(record, source))?;
    mark_guest_written(&image)
        .map_err(|e| runtime_error("mark the restored volume of", &record.id, e))?;
    let taken_at = match &record.durable {
        Some(copy) if copy.generation == manifest.generation => copy.taken_at.clone(),
        _ => crate::durable::rfc3339(manifest.created_unix),
    };
    let lost_s = OffsetDateTime::parse(&taken_at, &Rfc3339).map_or(0, |taken| {
        (OffsetDateTime::now_utc() - taken).whole_seconds().max(0) as u64
    });
    let restored = VolumeRestored {
        generation: manifest.generation,
        taken_at,
        reason: reason.to_owned(),
        lost_s,
    };
    ctx.store.record_volume_restored(&record.id, &restored)?;
    tracing::info!(box_id = %record.id, name = %record.name, generation = manifest.generation, lost_s, reason, "volume restored from a durable copy");
    Ok(())
}

/// The file beside a box's volume image naming the volume epoch it is of; absent: 0.
const EPOCH_FILE: &str = "volume.epoch";

/// Before a start on this host: a box whose volume epoch is not the one of the image here
/// was moved off this host and back, or here from a lost node (`cluster::failover`), and
/// the image here (if any) is stale. It is dropped, and the box's newest durable copy
/// restored in its place (with no copy, the box starts on a new, empty volume, and its
/// log says so).
pub(crate) async fn restore_if_moved(t: &Transition<'_>) -> Result<(), OpError> {
    let ctx = t.ctx();
    let record = t.record();
    let image = volume_image(&ctx.data_dir, &record.id);
    let dir = image.parent().unwrap_or(&ctx.data_dir).to_path_buf();
    let epoch_file = dir.join(EPOCH_FILE);
    let here = std::fs::read_to_string(&epoch_file)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if here == record.volume_epoch {
        return Ok(());
    }
    let io = |action: &'static str, path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| OpError::Restore {
            name: record.name.clone(),
            source: Box::new(DurableError::Io {
                action,
                path,
                source,
            }),
        }
    };
    if let Err(e) = std::fs::remove_file(&image) {
        if e.kind() != std::io::ErrorKind::NotFound {
            return Err(io("remove the stale volume image", &image)(e));
        }
    }
    t.runtime()?
        .discard_snapshot(&record.id)
        .await
        .map_err(|e| runtime_error("discard the stale snapshot of", &record.id, e))?;
    std::fs::create_dir_all(&dir).map_err(io("create", &dir))?;
    if record.durable.is_some() {
        restore_held(t, None, "failover").await?;
    } else {
        tracing::warn!(box_id = %record.id, name = %record.name, "the box moved with no durable copy of its volume: it starts on an empty one");
        let restored = VolumeRestored {
            generation: 0,
            taken_at: String::new(),
            reason: "failover without a copy: the volume starts empty".into(),
            lost_s: 0,
        };
        ctx.store.record_volume_restored(&record.id, &restored)?;
    }
    std::fs::write(&epoch_file, format!("{}\n", record.volume_epoch))
        .map_err(io("write", &epoch_file))?;
    Ok(())
}

fn restore_error(record: &BoxRecord, source: DurableError) -> OpError {
    OpError::Restore {
        name: record.name.clone(),
        source: Box::new(source),
    }
}
