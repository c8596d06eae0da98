//! Taking a box down the ladder without stopping it: pause (every process frozen in memory)
//! and snapshot (memory and device state saved next to the volume, the VMM gone). Both for
//! `POST /v1/boxes/{ref}/pause|snapshot` and for the reclaimer's rungs; waking back up is
//! [`super::wake`]'s.

use berth_protocol::BoxId;
use berth_runtime::{error_chain, RuntimeError};
use berth_store::{BoxRecord, BoxState};

use crate::boxes::Live;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::ops::box_find::reload;

/// Pauses the running box (a paused box stays as it is); returns its row.
pub(super) async fn pause_box(ctx: &Ctx, id: &BoxId) -> Result<BoxRecord, OpError> {
    let (ctx, id) = (ctx.clone(), id.clone());
    detached(&id.clone(), async move {
        let slot = ctx.boxes.slot(&id);
        let mut live = slot.lifecycle.lock().await;
        pause_held(&ctx, &id, &mut live, None).await?;
        reload(&ctx, &id)
    })
    .await
}

/// Snapshots the running or paused box (a snapshotted box stays as it is); returns its row.
pub(super) async fn snapshot_box(ctx: &Ctx, id: &BoxId) -> Result<BoxRecord, OpError> {
    let (ctx, id) = (ctx.clone(), id.clone());
    detached(&id.clone(), async move {
        let slot = ctx.boxes.slot(&id);
        let mut live = slot.lifecycle.lock().await;
        snapshot_held(&ctx, &id, &mut live, None).await?;
        reload(&ctx, &id)
    })
    .await
}

/// Pauses the box with its lifecycle lock held; `reason` goes on the state change.
pub(super) async fn pause_held(
    ctx: &Ctx,
    id: &BoxId,
    live: &mut Live,
    reason: Option<&str>,
) -> Result<(), OpError> {
    let record = reload(ctx, id)?;
    match record.state {
        BoxState::Paused => return Ok(()),
        BoxState::Running if live.client.is_some() => {}
        state => {
            return Err(cannot(
                &record,
                "paused",
                format!("it is {state}; only a running box can be"),
            ))
        }
    }
    let runtime = ctx.runtime_of(&record)?;
    if !runtime.capabilities().pause {
        let why = format!("the {} runtime cannot pause boxes", runtime.name());
        return Err(cannot(&record, "paused", why));
    }
    runtime
        .pause(id)
        .await
        .map_err(|source| runtime_error(&record, "pause", source))?;
    ctx.store
        .update_box_state(id, record.generation, BoxState::Paused, reason)?;
    tracing::info!(box_id = %id, name = %record.name, "box paused");
    Ok(())
}

/// Snapshots the box with its lifecycle lock held; `reason` goes on the state change. The
/// boot's pumps and exit watch end first (the VMM goes away under them), the rest of the
/// boot once the snapshot is saved; its boot token and egress CA stay, for the restore.
pub(super) async fn snapshot_held(
    ctx: &Ctx,
    id: &BoxId,
    live: &mut Live,
    reason: Option<&str>,
) -> Result<(), OpError> {
    let record = reload(ctx, id)?;
    let runtime = ctx.runtime_of(&record)?;
    if !runtime.capabilities().snapshot {
        // The runtime refuses without touching the box, and its refusal names what blocks it.
        let why = match runtime.snapshot(id).await {
            Err(e) => error_chain(&e),
            Ok(()) => format!(
                "the {} runtime says it cannot snapshot boxes",
                runtime.name()
            ),
        };
        return Err(cannot(&record, "snapshotted", why));
    }
    match record.state {
        BoxState::Snapshotted => return Ok(()),
        BoxState::Running | BoxState::Paused if live.client.is_some() => {}
        state => {
            let why = format!("it is {state}; only a running or paused box can be");
            return Err(cannot(&record, "snapshotted", why));
        }
    }
    live.pumps = None;
    live.exit_watch = None;
    let began = std::time::Instant::now();
    if let Err(source) = runtime.snapshot(id).await {
        // The VMM may still run the box: keep the boot as it was, with fresh pumps.
        tracing::warn!(box_id = %id, error = %error_chain(&source), "the snapshot failed");
        let error = runtime_error(&record, "snapshot", source);
        restart_boot(ctx, id, live, &record).await;
        return Err(error);
    }
    live.end_boot();
    ctx.store
        .update_box_state(id, record.generation, BoxState::Snapshotted, reason)?;
    tracing::info!(box_id = %id, name = %record.name, elapsed_ms = began.elapsed().as_millis() as u64, "box snapshotted");
    Ok(())
}

/// After a snapshot that failed: if the box still runs, its pumps and exit watch start
/// again for the same boot; if not, the boot is over and the next wake starts it.
async fn restart_boot(ctx: &Ctx, id: &BoxId, live: &mut Live, record: &BoxRecord) {
    let Some(client) = live.client.clone() else {
        return;
    };
    let Ok(runtime) = ctx.runtime_of(record) else {
        return;
    };
    use berth_runtime::RuntimeStatus;
    if !matches!(
        runtime.status(id).await,
        Ok(RuntimeStatus::Running | RuntimeStatus::Paused)
    ) {
        live.end_boot();
        return;
    }
    live.exit_watch = Some(super::ExitWatch::start(ctx, id, runtime, live.boot));
    live.pumps = Some(crate::pumps::start(
        ctx,
        id,
        client,
        live.boot,
        ctx.box_has_harness(record),
    ));
}

fn cannot(record: &BoxRecord, action: &'static str, why: String) -> OpError {
    OpError::CannotSleep {
        name: record.name.clone(),
        action,
        why,
    }
}

fn runtime_error(record: &BoxRecord, action: &'static str, source: RuntimeError) -> OpError {
    match source {
        RuntimeError::Unsupported { .. } => {
            cannot(record, action_done(action), error_chain(&source))
        }
        source => OpError::Runtime {
            action,
            id: record.id.clone(),
            source: Box::new(source),
        },
    }
}

fn action_done(action: &'static str) -> &'static str {
    match action {
        "pause" => "paused",
        _ => "snapshotted",
    }
}
