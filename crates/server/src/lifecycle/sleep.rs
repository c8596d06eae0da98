//! Taking a box down the ladder ([`descend`]): pause (every process frozen in memory),
//! snapshot (memory and device state saved next to the volume, the VMM gone), or stop
//! (`super::stop`). For `POST /v1/boxes/{ref}/pause|snapshot|stop` and the reclaimer's
//! rungs; waking back up is [`super::wake`]'s.

use berth_protocol::BoxId;
use berth_runtime::{error_chain, RuntimeError, RuntimeStatus};
use berth_store::{BoxRecord, BoxState};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::lifecycle::transition::{runtime_error, Kind, Step, Transition};

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
        let kind = match rung {
            Rung::Pause => Kind::Pause,
            Rung::Snapshot => Kind::Snapshot,
            Rung::Stop => Kind::Stop,
        };
        let mut t = Transition::begin(&ctx, &id, kind).await?;
        descend_held(&mut t, rung, None).await?;
        t.finish()
    })
    .await
}

/// Takes the box held by `t` to `rung`; `reason` goes on the state change.
pub(super) async fn descend_held(
    t: &mut Transition<'_>,
    rung: Rung,
    reason: Option<&str>,
) -> Result<(), OpError> {
    match rung {
        Rung::Pause => pause_held(t, reason).await,
        Rung::Snapshot => snapshot_held(t, reason).await,
        Rung::Stop => super::stop::stop_held(t).await,
    }
}

/// Pauses the box held by `t`; `reason` goes on the state change.
async fn pause_held(t: &mut Transition<'_>, reason: Option<&str>) -> Result<(), OpError> {
    let record = t.record().clone();
    match record.state {
        BoxState::Paused => return Ok(()),
        BoxState::Running if t.live.client.is_some() => {}
        state => {
            return Err(cannot(
                &record,
                Rung::Pause,
                format!("it is {state}; only a running box can be"),
            ))
        }
    }
    let runtime = t.runtime()?;
    if !runtime.capabilities().pause {
        let why = format!("the {} runtime cannot pause boxes", runtime.name());
        return Err(cannot(&record, Rung::Pause, why));
    }
    t.run(Step::RuntimePause, None, runtime.pause(&record.id))
        .await
        .map_err(|source| rung_error(&record, Rung::Pause, source))?;
    t.write(BoxState::Paused, reason)?;
    tracing::info!(box_id = %record.id, name = %record.name, "box paused");
    Ok(())
}

/// Snapshots the box held by `t`; `reason` goes on the state change. The boot's pumps and
/// exit watch end first (the VMM goes away under them), the rest of the boot once the
/// snapshot is saved; its boot token and egress CA stay, for the restore.
async fn snapshot_held(t: &mut Transition<'_>, reason: Option<&str>) -> Result<(), OpError> {
    let record = t.record().clone();
    let runtime = t.runtime()?;
    if !runtime.capabilities().snapshot {
        let why = format!(
            "the {} runtime does not support snapshots (its capabilities: GET /v1/runtimes)",
            runtime.name()
        );
        return Err(cannot(&record, Rung::Snapshot, why));
    }
    match record.state {
        BoxState::Snapshotted => return Ok(()),
        BoxState::Running | BoxState::Paused if t.live.client.is_some() => {}
        state => {
            let why = format!("it is {state}; only a running or paused box can be");
            return Err(cannot(&record, Rung::Snapshot, why));
        }
    }
    t.live.pumps = None;
    t.live.exit_watch = None;
    let began = std::time::Instant::now();
    let id = &record.id;
    if let Err(source) = t
        .run(Step::RuntimeSnapshot, None, runtime.snapshot(id))
        .await
    {
        // The VMM may still run the box: keep the boot as it was, with fresh pumps.
        let error = rung_error(&record, Rung::Snapshot, source);
        restart_boot(t, &record).await;
        return Err(error);
    }
    t.live.end_boot();
    t.write(BoxState::Snapshotted, reason)?;
    super::copy::after_sleep(t).await;
    crate::memory::history::at_stop(t).await;
    tracing::info!(box_id = %id, name = %record.name, elapsed_ms = began.elapsed().as_millis() as u64, "box snapshotted");
    Ok(())
}

/// After a snapshot that failed: if the box still runs, its pumps and exit watch start
/// again for the same boot; if not, the boot is over and the next wake starts it.
async fn restart_boot(t: &mut Transition<'_>, record: &BoxRecord) {
    let Ok(runtime) = t.runtime() else {
        return;
    };
    if !matches!(
        runtime.status(&record.id).await,
        Ok(RuntimeStatus::Running | RuntimeStatus::Paused)
    ) {
        t.live.end_boot();
        return;
    }
    let ctx = t.ctx();
    let harness = ctx.box_has_harness(record);
    super::boot_tasks::start(ctx, &record.id, &mut t.live, runtime, harness);
}

fn cannot(record: &BoxRecord, rung: Rung, why: String) -> OpError {
    OpError::CannotSleep {
        name: record.name.clone(),
        action: rung.done(),
        why,
    }
}

/// A runtime's refusal reads like the daemon's own; any other failure is the runtime's.
fn rung_error(record: &BoxRecord, rung: Rung, source: RuntimeError) -> OpError {
    let action = match rung {
        Rung::Pause => "pause",
        Rung::Snapshot => "snapshot",
        Rung::Stop => "stop",
    };
    match source {
        RuntimeError::Unsupported { .. } => cannot(record, rung, error_chain(&source)),
        source => runtime_error(action, &record.id, source),
    }
}
