//! What keeps a running box awake right now, as far as the host knows without asking the
//! box: the same sources the idle reclaimer ([`super::idle`]) checks first (calls using
//! the box, its last use, its undelivered messages). The reclaimer also asks the box
//! whether its harness has a turn in flight and whether work inside (a terminal, a
//! background process) wants it up; that costs guest calls, so a box view does not.

use std::time::Duration;

use berth_store::{BoxRecord, BoxState};
use serde::Serialize;

use crate::ctx::Ctx;
use crate::lifecycle::Use;
use berth_runtime::error_chain;

/// Undelivered messages a view names (the oldest first); more are still waiting.
const MESSAGES_SHOWN: u32 = 10;

/// One reason a box is not reclaimed as idle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AwakeReason {
    /// A message not yet acknowledged by the harness (waiting, or its turn running
    /// without a replay or a `result` yet).
    Message { id: String },
    /// Calls using the box now: exec streams, file calls, attached terminals, a delivery.
    Calls { count: u32 },
    /// Nothing uses it, but it was used `idle_s` ago, less than its `stop_after_s`.
    RecentUse { idle_s: u64 },
}

/// Why box `r` is awake; empty for a box that is not running or that the reclaimer may
/// stop (unless the box itself says it has work).
pub fn awake_because(ctx: &Ctx, r: &BoxRecord) -> Vec<AwakeReason> {
    if r.state != BoxState::Running {
        return Vec::new();
    }
    let mut reasons: Vec<AwakeReason> = match ctx.store.undelivered_ids(&r.id, MESSAGES_SHOWN) {
        Ok(ids) => ids
            .into_iter()
            .map(|id| AwakeReason::Message { id: id.to_string() })
            .collect(),
        Err(e) => {
            tracing::warn!(box_id = %r.id, error = %error_chain(&e), "reading the box's waiting messages");
            Vec::new()
        }
    };
    match ctx.activity.peek(&r.id) {
        Some(Use::Busy(count)) => reasons.push(AwakeReason::Calls { count }),
        Some(Use::IdleFor(idle)) if idle < Duration::from_secs(r.stop_after_s) => {
            reasons.push(AwakeReason::RecentUse {
                idle_s: idle.as_secs(),
            })
        }
        Some(Use::IdleFor(_)) | None => {}
    }
    reasons
}
