//! Taking a box down the ladder ([`descend`]): pause (every process frozen in memory),
//! snapshot (memory and device state saved next to the volume, the VMM gone), or stop
//! (`super::stop`). For `POST /v1/boxes/{ref}/pause|snapshot|stop` and the reclaimer's
//! rungs; waking back up is [`super::wake`]'s.

use berth_protocol::BoxId;
use berth_runtime::{error_chain, RuntimeError, RuntimeStatus};
use berth_store::{BoxRecord, BoxState};

use crate::boxes::Live;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::ops::box_find::reload;

/// A rung of the ladder below running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rung {
    Pause,
    Snapshot,
    Stop,
}

impl Rung {
    /// The state the rung leaves a box in, as a word for messages.
    fn done(self) -> &'static str {
        match self {
            Rung::Pause => "paused",
            Rung::Snapshot => "snapshotted",
            Rung::Stop => "stopped",
        }
    }
}

/// Takes the box to `rung` (a box already there stays as it is); returns its row.
pub(super) async fn descend(ctx: &Ctx, id: &BoxId, rung: Rung) -> Result<BoxRecord, OpError> {
    let (ctx, id) = (ctx.clone(), id.clone());
    detached(&id.clone(), async move {
        let slot = ctx.boxes.slot(&id);
        let mut live = slot.lifecycle.lock().await;
        descend_held(&ctx, &id, &mut live, rung, None).await?;
        reload(&ctx, &id)
    })
    .await
}

/// Takes the box to `rung` with its lifecycle lock held; `reason` goes on the state change.
pub(super) async fn descend_held(
    ctx: &Ctx,
    id: &BoxId,
    live: &mut Live,
    rung: Rung,
    reason: Option<&str>,
) -> Result<(), OpError> {
    match rung {
        Rung::Pause => pause_held(ctx, id, live, reason).await,
        Rung::Snapshot => snapshot_held(ctx, id, live, reason).await,
        Rung::Stop => super::stop::stop_held(ctx, id, live).await,
    }
}

/// Pauses the box with its lifecycle lock held; `reason` goes on the state change.
async fn pause_held(
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
                Rung::Pause,
                format!("it is {state}; only a running box can be"),
            ))
        }
    }
    let runtime = ctx.runtime_of(&record)?;
    if !runtime.capabilities().pause {
        let why = format!("the {} runtime cannot pause boxes", runtime.name());
        return Err(cannot(&record, Rung::Pause, why));
    }
    runtime
        .pause(id)
        .await
        .map_err(|source| runtime_error(&record, Rung::Pause, source))?;
    ctx.store
        .update_box_state(id, record.generation, BoxState::Paused, reason)?;
    tracing::info!(box_id = %id, name = %record.name, "box paused");
    Ok(())
}

/// Snapshots the box with its lifecycle lock held; `reason` goes on the state change. The
/// boot's pumps and exit watch end first (the VMM goes away under them), the rest of the
/// boot once the snapshot is saved; its boot token and egress CA stay, for the restore.
async fn snapshot_held(
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
        return Err(cannot(&record, Rung::Snapshot, why));
    }
    match record.state {
        BoxState::Snapshotted => return Ok(()),
        BoxState::Running | BoxState::Paused if live.client.is_some() => {}
        state => {
            let why = format!("it is {state}; only a running or paused box can be");
            return Err(cannot(&record, Rung::Snapshot, why));
        }
    }
    live.pumps = None;
    live.exit_watch = None;
    let began = std::time::Instant::now();
    if let Err(source) = runtime.snapshot(id).await {
        // The VMM may still run the box: keep the boot as it was, with fresh pumps.
        tracing::warn!(box_id = %id, error = %error_chain(&source), "the snapshot failed");
        let error = runtime_error(&record, Rung::Snapshot, source);
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
    let Ok(runtime) = ctx.runtime_of(record) else {
        return;
    };
    if !matches!(
        runtime.status(id).await,
        Ok(RuntimeStatus::Running | RuntimeStatus::Paused)
    ) {
        live.end_boot();
        return;
    }
    super::boot_tasks::start(ctx, id, live, runtime, ctx.box_has_harness(record));
}

fn cannot(record: &BoxRecord, rung: Rung, why: String) -> OpError {
    OpError::CannotSleep {
        name: record.name.clone(),
        action: rung.done(),
        why,
    }
}

/// A runtime's refusal reads like the daemon's own; any other failure is the runtime's.
fn runtime_error(record: &BoxRecord, rung: Rung, source: RuntimeError) -> OpError {
    match source {
        RuntimeError::Unsupported { .. } => cannot(record, rung, error_chain(&source)),
        source => OpError::Runtime {
            action: match rung {
                Rung::Pause => "pause",
                Rung::Snapshot => "snapshot",
                Rung::Stop => "stop",
            },
            id: record.id.clone(),
            source: Box::new(source),
        },
    }
}
