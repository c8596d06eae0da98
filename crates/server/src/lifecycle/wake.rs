//! Waking a box by its cheapest rung: `POST /v1/boxes/{ref}/start|resume`, and every call
//! that needs the box (exec, files, a message). A paused box is thawed, a snapshotted one
//! restored (a cold boot if the restore fails), a stopped or failed one cold-started. Under
//! the box's lifecycle lock, so concurrent wakes wake it once. The wake that wakes it
//! reports how long its caller waited (`berth_box_wake_seconds`), warm-pool boots aside.

use std::future::Future;
use std::time::Instant;

use berth_protocol::BoxId;
use berth_runtime::{error_chain, GuestClient, GuestError, RuntimeStatus};
use berth_store::{BoxRecord, BoxState};

use crate::ctx::{Ctx, STOP_GRACE};
use crate::error::OpError;
use crate::lifecycle::boot::boot;
use crate::lifecycle::detached::detached;
use crate::lifecycle::transition::{runtime_error, Kind, Step, Transition};
use crate::metrics::WakeFrom;
use crate::ops::box_find::reload;

/// Who wants the box awake: whether a box asleep with `auto_resume` off wakes for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waker {
    /// `start` or `resume`: always.
    Caller,
    /// A call that needs the box (exec, files, a message): per the box's `auto_resume`.
    Call,
}

/// Wakes the box if needed; returns its current row (`running`).
pub(super) async fn start_box(ctx: &Ctx, id: &BoxId, waker: Waker) -> Result<BoxRecord, OpError> {
    ensure_running(ctx, id, waker).await?;
    reload(ctx, id)
}

/// Runs `call` against the box's agent, waking the box first. When the agent cannot be
/// reached and the runtime says the box is no longer running (its processes died), the
/// box is recorded as stopped, woken again, and the call made once more: a refused
/// connection means the call never reached the box, so it is safe to repeat.
pub(super) async fn with_guest<T, F, Fut>(ctx: &Ctx, id: &BoxId, call: F) -> Result<T, OpError>
where
    F: Fn(GuestClient) -> Fut,
    Fut: Future<Output = Result<T, GuestError>>,
{
    let (client, boot) = ensure_running(ctx, id, Waker::Call).await?;
    match call(client).await {
        Err(GuestError::Connect { .. }) if forget_if_dead(ctx, id, boot).await? => {
            let (client, _) = ensure_running(ctx, id, Waker::Call).await?;
            Ok(call(client).await?)
        }
        other => Ok(other?),
    }
}

/// The guest client of the running box and its boot number, waking it by its cheapest
/// rung.
pub(super) async fn ensure_running(
    ctx: &Ctx,
    id: &BoxId,
    waker: Waker,
) -> Result<(GuestClient, u64), OpError> {
    let asked = Instant::now();
    let (ctx, task_id) = (ctx.clone(), id.clone());
    detached(id, async move {
        wake_locked(&ctx, &task_id, waker, asked).await
    })
    .await
}

/// Wakes the box for its queued messages without making the caller wait, and tells a
/// running delivery pump to look at the queue.
pub(super) fn wake_for_messages(ctx: &Ctx, id: &BoxId, waker: Waker) {
    ctx.boxes.slot(id).delivery.notify_one();
    // One wake per post: they queue on the box's lifecycle lock, and each after the first
    // finds the box running (a wake racing a stop still leaves the box running after).
    let (ctx, id) = (ctx.clone(), id.clone());
    // In the request's span: its lines carry the request's id.
    tokio::spawn(tracing::Instrument::in_current_span(async move {
        match ensure_running(&ctx, &id, waker).await {
            Ok(_) => {}
            Err(OpError::Asleep { .. }) => {
                tracing::debug!(box_id = %id, "the box sleeps with auto_resume off: its messages wait for a resume");
            }
            Err(e) => {
                tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot wake the box for its messages");
            }
        }
    }));
}

/// After boot `boot` of the box could not be reached: `true` when that boot is over (the
/// runtime no longer runs it, or another boot replaced it), so a new wake makes sense.
pub(super) async fn forget_if_dead(ctx: &Ctx, id: &BoxId, boot: u64) -> Result<bool, OpError> {
    let (ctx, id) = (ctx.clone(), id.clone());
    detached(&id.clone(), async move {
        let mut t = Transition::begin(&ctx, &id, Kind::Forget).await?;
        if t.live.boot != boot || t.live.client.is_none() {
            return Ok(true);
        }
        let runtime = t.runtime()?;
        let status = runtime
            .status(&id)
            .await
            .map_err(|source| runtime_error("query", &id, source))?;
        if status != RuntimeStatus::Stopped {
            return Ok(false);
        }
        tracing::warn!(box_id = %id, name = %t.record().name, "the box's processes exited; it will be started again");
        t.live.end_boot();
        t.run(Step::RuntimeStop, None, runtime.stop(&id, STOP_GRACE))
            .await
            .map_err(|source| runtime_error("stop", &id, source))?;
        if t.record().state.may_have_processes() {
            t.write(BoxState::Stopped, Some("its processes exited"))?;
        }
        Ok(true)
    })
    .await
}

/// Wakes the box under its lock; `asked`: when the caller asked for it.
async fn wake_locked(
    ctx: &Ctx,
    id: &BoxId,
    waker: Waker,
    asked: Instant,
) -> Result<(GuestClient, u64), OpError> {
    let mut t = Transition::begin(ctx, id, Kind::Start).await?;
    let woke = |t: &Transition<'_>, from: WakeFrom| {
        if !t.record().in_warm_pool() {
            ctx.metrics.lifecycle.woke(from, asked.elapsed());
        }
    };
    let runtime = t.runtime()?;
    let record = t.record();
    let asleep = matches!(record.state, BoxState::Paused | BoxState::Snapshotted);
    if asleep && !record.auto_resume && waker == Waker::Call {
        return Err(OpError::Asleep {
            name: record.name.clone(),
            state: record.state,
        });
    }
    match record.state {
        BoxState::Running => {
            if let Some(client) = &t.live.client {
                return Ok((client.clone(), t.live.boot));
            }
        }
        BoxState::Paused => {
            if let Some(client) = t.live.client.clone() {
                t.run(Step::RuntimeResume, None, runtime.resume(id))
                    .await
                    .map_err(|source| runtime_error("resume", id, source))?;
                t.write(BoxState::Running, None)?;
                woke(&t, WakeFrom::Paused);
                // The idle clock starts again at the wake, as after a cold start.
                ctx.activity.touch(id);
                tracing::info!(box_id = %id, name = %t.record().name, "box resumed");
                return Ok((client, t.live.boot));
            }
        }
        BoxState::Snapshotted => {
            let client = boot(&mut t, &runtime).await?;
            woke(&t, WakeFrom::Snapshotted);
            return Ok((client, t.live.boot));
        }
        BoxState::Stopped
        | BoxState::Failed
        | BoxState::Starting
        | BoxState::Stopping
        | BoxState::Deleted => {}
    }
    if t.record().state.may_have_processes() {
        // The store says something runs, but this daemon holds no client for it (a start
        // cut short): stop whatever is left, then cold start with a fresh token.
        t.live.end_boot();
        t.run(Step::RuntimeStop, None, runtime.stop(id, STOP_GRACE))
            .await
            .map_err(|source| runtime_error("stop", id, source))?;
        t.write(BoxState::Stopped, None)?;
    }
    let client = boot(&mut t, &runtime).await?;
    woke(&t, WakeFrom::Stopped);
    Ok((client, t.live.boot))
}

/// In a task of its own (the pumps call it; stopping the boot aborts them): if boot `boot`
/// is over, record it and wake the box again so its queue drains.
pub(super) fn wake_if_dead(ctx: &Ctx, id: &BoxId, boot: u64) {
    let (ctx, id) = (ctx.clone(), id.clone());
    tokio::spawn(async move {
        match forget_if_dead(&ctx, &id, boot).await {
            Ok(true) => {
                if let Err(e) = ensure_running(&ctx, &id, Waker::Call).await {
                    tracing::error!(box_id = %id, error = %error_chain(&e), "cannot wake the box again");
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(box_id = %id, error = %error_chain(&e), "cannot check whether the box is still running")
            }
        }
    });
}
