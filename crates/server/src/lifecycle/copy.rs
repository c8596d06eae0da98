//! Durable copies of a box's volume, taken where the lifecycle holds the box still
//! (`crate::durable` uploads them): at each sleep, the box stopped or snapshotted
//! ([`after_sleep`]), and every `[storage] sync_interval_s` while it runs ([`spawn_sync`]):
//! its volume frozen for the staging (the sandbox), or the box paused (a VM: the copy is
//! what a power cut would leave, which ext4's journal recovers), never for the upload.
//! A backup holds a box still the same way ([`with_volume_still`]).

use std::time::{Duration, SystemTime};

use berth_protocol::BoxId;
use berth_runtime::{error_chain, volume_image, RuntimeError};
use berth_store::{BoxRecord, BoxState};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::lifecycle::transition::{Kind, Transition};

/// Copies the volume of the box held by `t`, on which nothing runs now. A copy that cannot
/// be staged is logged: the sleep it follows stands.
pub(super) async fn after_sleep(t: &Transition<'_>) {
    let ctx = t.ctx();
    let Some(durable) = &ctx.durable else {
        return;
    };
    let image = volume_image(&ctx.data_dir, t.id());
    if !image.exists() {
        return; // never started: nothing to copy
    }
    if let Err(e) = durable.take(t.record(), &image).await {
        tracing::warn!(box_id = %t.id(), error = %error_chain(&e), "cannot take a durable copy of the volume");
    }
}

/// Copies each running box of this host whose newest copy is older than
/// `[storage] sync_interval_s` and whose volume changed since, one box at a time.
pub fn spawn_sync(ctx: Ctx) -> Option<tokio::task::JoinHandle<()>> {
    let every = ctx.durable.as_ref()?.sync_interval?;
    Some(tokio::spawn(async move {
        // Check a few times per interval, so a box is copied within 1.25 intervals.
        let tick = (every / 4).max(Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            let records = match ctx.store.list_boxes_on_node(ctx.role.node_scope()) {
                Ok(records) => records,
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "cannot list boxes to copy");
                    continue;
                }
            };
            for record in records.iter().filter(|r| due(&ctx, r, every)) {
                if let Err(e) = copy_running(&ctx, &record.id).await {
                    tracing::warn!(box_id = %record.id, error = %error_chain(&e), "cannot take a durable copy of a running box");
                }
            }
        }
    }))
}

/// Whether `record` runs and its newest copy is older than `every` and than its volume's
/// last write.
fn due(ctx: &Ctx, record: &BoxRecord, every: Duration) -> bool {
    if !matches!(record.state, BoxState::Running | BoxState::Paused) {
        return false;
    }
    let Some(copy) = &record.durable else {
        return true;
    };
    let Ok(taken) = OffsetDateTime::parse(&copy.taken_at, &Rfc3339) else {
        return true;
    };
    let taken = SystemTime::from(taken);
    let old = SystemTime::now()
        .duration_since(taken)
        .is_ok_and(|age| age >= every);
    // The image's mtime moves with each write that reaches it (the loop device's, the
    // VMM's): an idle box is not copied again and again.
    let written = std::fs::metadata(volume_image(&ctx.data_dir, &record.id))
        .and_then(|m| m.modified())
        .map_or(true, |at| at >= taken);
    old && written
}

/// Takes a copy of the running box `id`, holding it still only while its volume is staged.
pub(crate) async fn copy_running(ctx: &Ctx, id: &BoxId) -> Result<(), OpError> {
    let (ctx, id) = (ctx.clone(), id.clone());
    detached(&id.clone(), async move {
        let t = Transition::begin(&ctx, &id, Kind::Copy).await?;
        let Some(durable) = ctx.durable.clone() else {
            return Ok(());
        };
        let record = t.record().clone();
        if !matches!(record.state, BoxState::Running | BoxState::Paused) || t.live.client.is_none() {
            return Ok(()); // it went to sleep meanwhile, and was copied then
        }
        let image = volume_image(&ctx.data_dir, &id);
        // A runtime that can neither freeze nor pause: copied at its next sleep.
        if let Some(Err(e)) = with_volume_still(&t, durable.take(&record, &image)).await? {
            tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot take a durable copy of a running box");
        }
        Ok(())
    })
    .await
}

/// Runs `f` with the volume of the box held by `t` still. Nothing runs on a box that is
/// not running or paused; a running one has its volume frozen (its processes go on, their
/// writes wait), or where the runtime cannot freeze, is paused for `f`. `None`: the
/// runtime can do neither, and `f` did not run.
pub(crate) async fn with_volume_still<T>(
    t: &Transition<'_>,
    f: impl std::future::Future<Output = T>,
) -> Result<Option<T>, OpError> {
    let record = t.record();
    let id = &record.id;
    if !matches!(record.state, BoxState::Running | BoxState::Paused) || t.live.client.is_none() {
        return Ok(Some(f.await));
    }
    let runtime = t.runtime()?;
    let held = match runtime.freeze_volume(id).await {
        Ok(()) => Hold::Frozen,
        Err(RuntimeError::Unsupported { .. }) if record.state == BoxState::Paused => Hold::Paused,
        Err(RuntimeError::Unsupported { .. }) if runtime.capabilities().pause => {
            runtime
                .pause(id)
                .await
                .map_err(|e| crate::lifecycle::transition::runtime_error("pause", id, e))?;
            Hold::PausedHere
        }
        Err(RuntimeError::Unsupported { .. }) => return Ok(None),
        Err(e) => {
            return Err(crate::lifecycle::transition::runtime_error(
                "freeze the volume of",
                id,
                e,
            ))
        }
    };
    let done = f.await;
    let released = match held {
        Hold::Frozen => runtime.thaw_volume(id).await,
        Hold::PausedHere => runtime.resume(id).await,
        Hold::Paused => Ok(()),
    };
    if let Err(e) = released {
        // The box's writers (or its processes) would wait for good: say so loudly.
        tracing::error!(box_id = %id, error = %error_chain(&e), "cannot let a box go on after its volume was held still; stop and start it");
    }
    Ok(Some(done))
}

/// How a running box was held still for its copy.
enum Hold {
    /// Its volume frozen; its processes run on (their writes wait).
    Frozen,
    /// It was paused already.
    Paused,
    /// Paused for the copy, resumed after.
    PausedHere,
}
