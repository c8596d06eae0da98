//! The idle reclaimer: every tick, a box nobody used is taken down its sleep ladder to the
//! deepest rung its idle time has reached: paused after `pause_after_s`, snapshotted after
//! `snapshot_after_s`, stopped after `stop_after_s` (each 0: never; a rung the box's runtime
//! lacks is skipped). The next call that needs the box wakes it by the cheapest rung
//! (`super::wake`).
//!
//! Idle means: no [`ActivityGuard`](super::ActivityGuard) held (exec, file call, attached
//! terminal, message delivery; an open event stream is watching, not work, and holds
//! none), none dropped within the timeout, no message waiting in the store, a harness with
//! no turn in flight (a turn ends at its `result` or, in berth-init, at the template's
//! `turn_timeout_s`), and no work inside the box that keeps it awake (a terminal within
//! its grace, a background process). The last three cost a query and guest calls, so they
//! are asked only once the cheap check says the timeout has passed, and again
//! under the box's lifecycle lock right before the stop, so a concurrent wake is never cut.
//! A paused or snapshotted box went through those checks on its way down and has run
//! nothing since, so it goes further down on its idle time alone. The box view shows the
//! host-side part of this ([`super::awake`]).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_protocol::harness::HarnessStatus;
use berth_protocol::BoxId;
use berth_store::{BoxRecord, BoxState};

use crate::boxes::Live;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::sleep::{descend_held, Rung};
use crate::lifecycle::transition::{Kind, Transition};
use crate::lifecycle::Use;
use berth_runtime::error_chain;

/// How long the reclaimer waits for a harness to say whether it is busy.
const HARNESS_STATUS_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs the reclaimer until the task is aborted, checking every `every`.
pub fn spawn(ctx: Ctx, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let reclaiming = Arc::new(Mutex::new(HashSet::new()));
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            sweep(&ctx, &reclaiming);
        }
    })
}

/// Starts a reclaim for every running box past its timeout (one at a time per box).
fn sweep(ctx: &Ctx, reclaiming: &Arc<Mutex<HashSet<BoxId>>>) {
    let records = match ctx.store.list_boxes_on_node(ctx.role.node_scope()) {
        Ok(records) => records,
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "idle reclaimer: cannot list boxes");
            return;
        }
    };
    for record in records {
        if rung_due(ctx, &record).is_none() {
            continue;
        }
        if record.in_warm_pool() {
            continue;
        }
        if !reclaiming
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(record.id.clone())
        {
            continue;
        }
        let (ctx, reclaiming) = (ctx.clone(), reclaiming.clone());
        tokio::spawn(async move {
            let id = record.id.clone();
            if let Err(e) = reclaim(&ctx, &id).await {
                tracing::error!(box_id = %id, error = %error_chain(&e), "idle reclaimer: cannot take the box down its ladder");
            }
            reclaiming
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&id);
        });
    }
}

/// The cheap check: the deepest rung the box's idle time has reached (no call in flight,
/// none for that long) that is below where it is now, if any.
pub fn rung_due(ctx: &Ctx, record: &BoxRecord) -> Option<Rung> {
    let Use::IdleFor(idle) = ctx.activity.state(&record.id) else {
        return None;
    };
    let caps = ctx.runtimes.capabilities(&record.runtime);
    let reached = |after_s: u64| after_s > 0 && idle >= Duration::from_secs(after_s);
    let (running, paused, snapshotted) = (
        record.state == BoxState::Running,
        record.state == BoxState::Paused,
        record.state == BoxState::Snapshotted,
    );
    if (running || paused || snapshotted) && reached(record.stop_after_s) {
        Some(Rung::Stop)
    } else if (running || paused) && caps.snapshot && reached(record.snapshot_after_s) {
        Some(Rung::Snapshot)
    } else if running && caps.pause && reached(record.pause_after_s) {
        Some(Rung::Pause)
    } else {
        None
    }
}

/// Under the box's lifecycle lock: checks again, then takes the box to the rung due.
/// `Ok(Some(rung))` when it went there.
pub async fn reclaim(ctx: &Ctx, id: &BoxId) -> Result<Option<Rung>, OpError> {
    let mut t = Transition::begin(ctx, id, Kind::Reclaim).await?;
    let record = t.record().clone();
    let Some(rung) = rung_due(ctx, &record) else {
        return Ok(None);
    };
    if record.state == BoxState::Running
        && (harness_busy(&t.live, id).await
            || work_inside(&t.live, id).await
            || messages_waiting(ctx, id)?)
    {
        // Busy after all: the clock starts again from now.
        ctx.activity.touch(id);
        return Ok(None);
    }
    let reason = Some("idle");
    tracing::info!(box_id = %id, name = %record.name, from = %record.state, to = ?rung, "box idle: taking it down its ladder");
    descend_held(&mut t, rung, reason).await?;
    Ok(Some(rung))
}

/// Whether the box's harness has a turn in flight. A box that does not answer (no
/// harness, an agent without the call, a dead box) is not busy.
async fn harness_busy(live: &Live, id: &BoxId) -> bool {
    let Some(client) = live.client.clone() else {
        return false;
    };
    match tokio::time::timeout(HARNESS_STATUS_TIMEOUT, client.harness_status()).await {
        Ok(Ok(HarnessStatus {
            turns_in_flight, ..
        })) => turns_in_flight > 0,
        Ok(Err(e)) => {
            tracing::debug!(box_id = %id, error = %error_chain(&e), "idle reclaimer: no harness status");
            false
        }
        Err(_) => {
            tracing::warn!(box_id = %id, "idle reclaimer: the harness status did not come in time; counting the box as busy");
            true
        }
    }
}

/// Whether work inside the box keeps it awake: a terminal attached or detached within its
/// grace, a background process that asked to. An agent that cannot say (older, or not
/// answering) has none.
async fn work_inside(live: &Live, id: &BoxId) -> bool {
    let Some(client) = live.client.clone() else {
        return false;
    };
    match tokio::time::timeout(HARNESS_STATUS_TIMEOUT, client.busy()).await {
        Ok(Ok(busy)) => busy.is_busy(),
        Ok(Err(e)) => {
            tracing::debug!(box_id = %id, error = %error_chain(&e), "idle reclaimer: the box cannot say what work it has");
            false
        }
        Err(_) => {
            tracing::warn!(box_id = %id, "idle reclaimer: the box did not say in time what work it has; counting it as busy");
            true
        }
    }
}

/// Whether the store holds messages for the box that were not delivered yet.
fn messages_waiting(ctx: &Ctx, id: &BoxId) -> Result<bool, OpError> {
    Ok(ctx.store.count_undelivered(id)? > 0)
}
