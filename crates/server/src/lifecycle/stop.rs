//! `POST /v1/boxes/{ref}/stop`, the reclaimer's last rung, and the daemon's shutdown: the
//! processes die (or the snapshot is deleted), the volume stays.

use berth_protocol::BoxId;
use berth_store::BoxState;

use crate::ctx::{Ctx, STOP_GRACE};
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::ops::box_find::reload;
use berth_runtime::error_chain;

/// Stops the box with its lifecycle lock already held (`sleep::descend` for
/// `POST …/stop`; the idle reclaimer re-checks idleness under the lock, then stops).
pub(super) async fn stop_held(
    ctx: &Ctx,
    id: &BoxId,
    live: &mut crate::boxes::Live,
) -> Result<(), OpError> {
    stop_held_as(ctx, id, live, None).await
}

/// Stops the box with its lifecycle lock held and leaves it `stopped`, or `failed` with
/// `failure` as the reason.
async fn stop_held_as(
    ctx: &Ctx,
    id: &BoxId,
    live: &mut crate::boxes::Live,
    failure: Option<&str>,
) -> Result<(), OpError> {
    let record = reload(ctx, id)?;
    let generation = match record.state {
        BoxState::Stopped | BoxState::Deleted => return Ok(()),
        // Before any state change: a box whose runtime is gone stays as it is.
        _ if ctx.runtime_of(&record).is_err() => return ctx.runtime_of(&record).map(drop),
        BoxState::Running | BoxState::Paused => {
            ctx.store
                .update_box_state(id, record.generation, BoxState::Stopping, None)?
        }
        // Nothing to announce: go straight to `stopped` once the runtime is done.
        BoxState::Failed | BoxState::Starting | BoxState::Stopping | BoxState::Snapshotted => {
            record.generation
        }
    };
    live.end_boot();
    ctx.egress.end(id);
    let runtime = ctx.runtime_of(&record)?;
    // A stopped box starts cold: it keeps no snapshot.
    let stopped = match runtime.stop(id, STOP_GRACE).await {
        Ok(()) => runtime.discard_snapshot(id).await,
        Err(e) => Err(e),
    };
    if let Err(source) = stopped {
        let reason = format!("stop failed: {}", error_chain(&source));
        if record.state != BoxState::Failed {
            if let Err(e) =
                ctx.store
                    .update_box_state(id, generation, BoxState::Failed, Some(&reason))
            {
                tracing::error!(box_id = %id, error = %error_chain(&e), "cannot record a failed stop");
            }
        }
        return Err(OpError::Runtime {
            action: "stop",
            id: id.clone(),
            source: Box::new(source),
        });
    }
    match failure {
        None => {
            ctx.store
                .update_box_state(id, generation, BoxState::Stopped, None)?;
            tracing::info!(box_id = %id, name = %record.name, "box stopped");
        }
        Some(reason) => {
            ctx.store
                .update_box_state(id, generation, BoxState::Failed, Some(reason))?;
            tracing::warn!(box_id = %id, name = %record.name, reason, "box failed");
        }
    }
    Ok(())
}

/// The box's harness gave up (too many exits in a row): its processes are stopped and the
/// box is `failed` with the harness's reason. Its queued messages wait; the next call that
/// needs the box starts it again, with a fresh harness.
pub(super) async fn fail_box(ctx: &Ctx, id: &BoxId, reason: &str) -> Result<(), OpError> {
    let (ctx, task_id, reason) = (ctx.clone(), id.clone(), reason.to_owned());
    detached(id, async move {
        let slot = ctx.boxes.slot(&task_id);
        let mut live = slot.lifecycle.lock().await;
        if reload(&ctx, &task_id)?.state != BoxState::Running {
            return Ok(());
        }
        stop_held_as(&ctx, &task_id, &mut live, Some(&reason)).await
    })
    .await
}
