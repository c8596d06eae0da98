//! E2B's timeout, enforced: a task that sleeps until the soonest armed deadline of any
//! sandbox (or until a deadline moves: create, connect, set_timeout, pause ring
//! [`super::E2b::deadline_moved`]), then acts on every sandbox due: its box is deleted, or,
//! made with `autoPause`, paused (processes kept; with `autoPauseMemory: false`, stopped
//! with its disk kept). A paused sandbox has no deadline until `connect` brings it back.
//!
//! Deadlines are in the store, so they outlive the daemon: after a restart (which stops
//! every box) a sandbox due meanwhile is killed at once, and an auto-pausing one, stopped
//! already, simply stays so. Each due sandbox is claimed (disarmed) in the store before
//! anything is done to it, so it is acted on once; an action that fails is tried again
//! [`RETRY_FAILED`] later, with its deadline moved there.

use std::time::Duration;

use berth_runtime::error_chain;
use berth_store::E2bSandbox;
use tokio::task::JoinSet;

use crate::ctx::Ctx;
use crate::e2b::now_ms;
use crate::e2b::view::state;
use crate::e2b::wire::SandboxState;
use crate::error::OpError;
use crate::ops::box_delete;

/// Longest sleep: the wall clock may jump while the task sleeps on the monotonic one.
const MAX_SLEEP: Duration = Duration::from_secs(60);
/// After a store failure, the task looks again this much later.
const RETRY_STORE: Duration = Duration::from_secs(1);
/// A kill or pause that failed is tried again this much later.
const RETRY_FAILED: Duration = Duration::from_secs(30);
/// Sandboxes claimed per look at the store.
const BATCH: u32 = 64;

/// Runs until the task is aborted (at shutdown); an action under way then finishes in the
/// box's own lifecycle task.
pub fn spawn(ctx: Ctx) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut acting = JoinSet::new();
        loop {
            let wait = match ctx.store.claim_due_e2b(now_ms(), BATCH) {
                Ok(due) => {
                    let more = due.len() == BATCH as usize;
                    for sandbox in due {
                        acting.spawn(act(ctx.clone(), sandbox));
                    }
                    if more {
                        Duration::ZERO
                    } else {
                        until_next(&ctx)
                    }
                }
                Err(e) => {
                    tracing::error!(error = %error_chain(&e), "E2B lifetimes: the store failed; retrying");
                    RETRY_STORE
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = ctx.e2b.deadlines().notified() => {}
                Some(_) = acting.join_next(), if !acting.is_empty() => {}
            }
        }
    })
}

/// How long until the soonest armed deadline.
fn until_next(ctx: &Ctx) -> Duration {
    match ctx.store.next_e2b_deadline_ms() {
        Ok(Some(at)) => {
            let ms = u64::try_from(at.saturating_sub(now_ms())).unwrap_or(0);
            Duration::from_millis(ms).min(MAX_SLEEP)
        }
        Ok(None) => MAX_SLEEP,
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "E2B lifetimes: cannot read the next deadline");
            RETRY_STORE
        }
    }
}

/// Kills or pauses the claimed sandbox; on failure, arms it again for a later try.
async fn act(ctx: Ctx, sandbox: E2bSandbox) {
    let id = &sandbox.box_id;
    let outcome = match ctx.store.get_box(id) {
        Ok(None) => return,
        Ok(Some(record)) if sandbox.auto_pause => {
            if state(&record) == SandboxState::Paused {
                // Paused (or stopped) some other way already: nothing to do.
                return;
            }
            if sandbox.auto_pause_memory {
                ctx.lifecycle().pause(id).await.map(|_| "paused")
            } else {
                ctx.lifecycle().stop(id).await.map(|_| "paused (stopped)")
            }
        }
        Ok(Some(_)) => box_delete::delete_box(&ctx, id).await.map(|()| "killed"),
        Err(e) => Err(OpError::from(e)),
    };
    match outcome {
        Ok(done) => {
            tracing::info!(box_id = %id, sandbox_id = %sandbox.sandbox_id, "E2B sandbox timed out: {done}");
        }
        Err(OpError::BoxNotFound { .. }) => {}
        Err(e) => {
            let retry_at = now_ms() + RETRY_FAILED.as_millis() as i64;
            tracing::warn!(box_id = %id, sandbox_id = %sandbox.sandbox_id, error = %error_chain(&e), "E2B sandbox timed out, but cannot be killed or paused; trying again in {}s", RETRY_FAILED.as_secs());
            match ctx.store.set_e2b_timeout(id, retry_at, true) {
                Ok(_) => ctx.e2b.deadline_moved(),
                Err(e) => {
                    tracing::error!(box_id = %id, error = %error_chain(&e), "cannot arm the E2B sandbox's timeout again");
                }
            }
        }
    }
}
