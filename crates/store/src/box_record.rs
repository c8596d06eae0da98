//! A box as the store holds it: its record and the limits its processes run under. Its own
//! file so that the queries (`boxes.rs`) and the row parsing (`box_rows.rs`) both read it
//! without importing each other.

use std::collections::BTreeMap;

use berth_protocol::{BoxId, TenantId};
use time::OffsetDateTime;

use crate::box_outcomes::{LastBoot, TransitionFailure};
use crate::durable::DurableCopy;
use crate::sleep::SleepSettings;
use crate::state::BoxState;

/// The limits a box's processes run under.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BoxLimits {
    pub memory_mib: u64,
    pub pids: u64,
    pub cpus: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BoxRecord {
    pub id: BoxId,
    pub tenant_id: TenantId,
    pub name: String,
    pub template: String,
    pub state: BoxState,
    /// Why the box is `failed` (or how it got to its state), for people.
    pub state_reason: Option<String>,
    pub memory_mib: u64,
    pub pids: u64,
    pub cpus: f64,
    /// Idle seconds before the box is stopped (0: never).
    pub stop_after_s: u64,
    /// Idle seconds before the box is paused, and before it is snapshotted (0: never).
    pub pause_after_s: u64,
    pub snapshot_after_s: u64,
    /// Whether a call that needs a paused or snapshotted box wakes it.
    pub auto_resume: bool,
    /// Stable for the box's life: the runtime's uid range. Another box gets it only after
    /// this one's row is deleted, which the daemon does once its files, mounts and
    /// processes are gone.
    pub id_slot: u32,
    /// Bumped by every state change.
    pub generation: u64,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
    /// The box's own egress policy as JSON, as given at creation; `None`: its template's.
    pub egress: Option<String>,
    /// The runtime the box runs on, fixed at creation (`sandbox` for boxes made before
    /// runtimes could be chosen).
    pub runtime: String,
    /// The box's own volume size; `None`: its template's.
    pub disk_mib: Option<u64>,
    pub labels: BTreeMap<String, String>,
    pub env: BTreeMap<String, String>,
    /// Limits set while the box may have processes: its next start applies them.
    pub pending_limits: Option<BoxLimits>,
    /// The last transition that failed, until the box's next state change.
    pub failure: Option<TransitionFailure>,
    /// How the box's last successful boot went; `None` before one was measured.
    pub last_boot: Option<LastBoot>,
    /// The node the box lives on (`nodes.id`); `None` on a single host.
    pub node_id: Option<String>,
    /// The newest copy of the box's volume in the chunk store; `None` before the first.
    pub durable: Option<DurableCopy>,
    /// Rises each time the volume is taken from a lost node: a local image of an older
    /// epoch is stale.
    pub volume_epoch: u64,
}

impl BoxRecord {
    pub fn sleep(&self) -> SleepSettings {
        SleepSettings {
            pause_after_s: self.pause_after_s,
            snapshot_after_s: self.snapshot_after_s,
            stop_after_s: self.stop_after_s,
            auto_resume: self.auto_resume,
        }
    }

    /// The limits the box's processes run under now (or would, stopped).
    pub fn limits(&self) -> BoxLimits {
        BoxLimits {
            memory_mib: self.memory_mib,
            pids: self.pids,
            cpus: self.cpus,
        }
    }

    /// The limits the box's next start applies.
    pub fn next_limits(&self) -> BoxLimits {
        self.pending_limits.unwrap_or_else(|| self.limits())
    }
}
