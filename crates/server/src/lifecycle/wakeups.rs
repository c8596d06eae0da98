//! The wakeup scheduler: sleeps until the soonest slot of any box's wakeup (or until a
//! wakeup is added or cancelled), then fires every due slot.
//!
//! Firing slot `s` of wakeup `w` posts `w`'s message through the store's durable path under
//! the key `wake:<w>:<s>`, then, in one transaction, moves `w` to its next slot (or deletes
//! it) and appends a `wakeup` event (`wakeup_id`, `slot`, `late_ms`, `message_id`) to the
//! box's log, then wakes the box as a posted message does. A crash between the post and the
//! transaction re-posts the same key on the next start, which the store answers with the
//! message it already has: each slot's message and event exist once. A slot that passed
//! while the daemon was down fires at start with its lateness in the event; a cron that
//! missed several slots fires once for them and goes on from the next slot after now.
//!
//! A slot of a wakeup the box made itself fires only while the box's own slots fired in
//! the last hour are fewer than `[wakeups] box_max_per_hour`; past it the slot is skipped,
//! not queued: the wakeup moves on to its next slot and counts the skip, and the box's log
//! (a `wakeup` event with `skipped`) and the daemon's log say so once an hour. So no number
//! of crons makes a box run more turns an hour than that.
//!
//! [`relay`] answers the requests a box makes of itself (`berth-wake`). Time is
//! [`clock`]'s.

pub mod clock;
pub mod config;
pub mod doorbell;
pub mod error;
pub mod relay;
pub mod schedule;

use std::time::Duration;

use berth_protocol::wake::WAKEUP_EVENT;
use berth_store::{SlotFinished, SlotOutcome, SlotReached, StoreError, Wakeup, WakeupOrigin};
use serde_json::json;

use crate::ctx::Ctx;
use crate::ops::wakeups::rfc3339_ms;
use berth_runtime::error_chain;

/// Longest sleep: the wall clock may jump while the scheduler sleeps on the monotonic one.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// After a store failure, the scheduler waits this long before it looks again.
const RETRY: Duration = Duration::from_secs(1);
/// Slots fired per look at the store.
const BATCH: u32 = 64;

/// Runs the scheduler until the task is aborted.
pub fn spawn(ctx: Ctx) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let wait = match fire_due(&ctx) {
                Ok(()) => until_next(&ctx),
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), "wakeups: the store failed; retrying");
                    RETRY
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = ctx.wakeups.bell().notified() => {}
            }
        }
    })
}

/// How long until the soonest slot.
fn until_next(ctx: &Ctx) -> Duration {
    match ctx.store.next_wakeup_due_ms() {
        Ok(Some(due)) => {
            let ms = u64::try_from(due.saturating_sub(ctx.wakeups.now_ms())).unwrap_or(0);
            Duration::from_millis(ms).min(MAX_SLEEP)
        }
        Ok(None) => MAX_SLEEP,
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "wakeups: cannot read the next slot");
            RETRY
        }
    }
}

/// Fires every slot due now.
fn fire_due(ctx: &Ctx) -> Result<(), StoreError> {
    loop {
        let now = ctx.wakeups.now_ms();
        let due = ctx.store.due_wakeups(now, BATCH)?;
        let full = due.len() == BATCH as usize;
        for wakeup in &due {
            fire(ctx, wakeup, now)?;
        }
        if !full {
            return Ok(());
        }
    }
}

/// Fires the wakeup's current slot.
fn fire(ctx: &Ctx, wakeup: &Wakeup, now: i64) -> Result<(), StoreError> {
    let slot = wakeup.next_due_ms;
    let late_ms = now.saturating_sub(slot).max(0);
    let next = match schedule::next_slot(&wakeup.kind, slot.max(now)) {
        Ok(next) => next,
        Err(e) => {
            // Checked when it was made; a stored one that no longer parses ends here.
            tracing::error!(wakeup = %wakeup.id, error = %error_chain(&e), "wakeups: the stored cron is invalid; this is its last slot");
            None
        }
    };
    let reached = SlotReached {
        slot_ms: slot,
        next_ms: next,
        now_ms: now,
    };
    let mut event = json!({
        "wakeup_id": wakeup.id,
        "kind": wakeup.kind.as_str(),
        "slot": rfc3339_ms(slot),
        "late_ms": late_ms,
        "created_by": wakeup.created_by.as_str(),
        "next_due_at": next.map(rfc3339_ms),
    });
    if wakeup.created_by == WakeupOrigin::Box {
        let max = ctx.wakeups.config().box_max_per_hour;
        if ctx.store.box_slots_fired(&wakeup.box_id, now)? >= max {
            return skip(ctx, wakeup, reached, event, max);
        }
    }
    let takes_messages = ctx
        .store
        .get_box(&wakeup.box_id)?
        .is_some_and(|record| ctx.box_has_harness(&record));
    let posted = if takes_messages {
        let key = wakeup.slot_key(slot);
        match ctx
            .store
            .post_message(&wakeup.box_id, Some(&key), &wakeup.message)
        {
            Ok(posted) => Some(posted.id),
            // The box went between the two reads: its wakeups went with it.
            Err(StoreError::BoxNotFound { .. }) => return Ok(()),
            Err(e) => return Err(e),
        }
    } else {
        // A template reloaded without a harness takes no messages: the slot passes.
        event["skipped"] = json!("the box's template runs no harness, so it takes no messages");
        None
    };
    if let Some(id) = &posted {
        event["message_id"] = json!(id.as_str());
    }
    let finished = ctx.store.finish_slot(
        wakeup,
        reached,
        SlotOutcome::Fired,
        (WAKEUP_EVENT, &event),
        ctx.jobs.fence().as_ref(),
    )?;
    if posted.is_some() {
        if finished != SlotFinished::Gone {
            tracing::info!(box_id = %wakeup.box_id, wakeup = %wakeup.id, late_ms, "wakeup fired");
        }
        ctx.lifecycle().wake_for_wakeup(&wakeup.box_id);
    }
    Ok(())
}

/// Skips the slot of a box-made wakeup whose box is past its hourly limit; the box's log and
/// the daemon's are told once an hour.
fn skip(
    ctx: &Ctx,
    wakeup: &Wakeup,
    reached: SlotReached,
    mut event: serde_json::Value,
    max: u64,
) -> Result<(), StoreError> {
    event["skipped"] = json!(format!(
        "this box's own wakeups fired {max} slots in the last hour (`[wakeups] box_max_per_hour`): \
         their slots are skipped, not queued, until the hour has room; `skipped` in the \
         wakeup list counts them"
    ));
    match ctx.store.finish_slot(
        wakeup,
        reached,
        SlotOutcome::Skipped,
        (WAKEUP_EVENT, &event),
        ctx.jobs.fence().as_ref(),
    )? {
        SlotFinished::Logged => {
            tracing::warn!(box_id = %wakeup.box_id, wakeup = %wakeup.id, max, "wakeups: the box's own slots are past `[wakeups] box_max_per_hour`; skipping them (said once an hour)");
        }
        SlotFinished::Counted => {
            tracing::debug!(box_id = %wakeup.box_id, wakeup = %wakeup.id, "wakeups: a slot of the box's own skipped");
        }
        SlotFinished::Gone => {}
    }
    Ok(())
}
