//! What the daemon keeps about how a box's transitions went: the last one that failed (its
//! step, its cause, what to do about it) and the last boot that succeeded (its phases and
//! their timings). Both are for people reading the box (`GET /v1/boxes/{ref}`, `berth box
//! show`); the state machine never looks at them.

use berth_protocol::BoxId;
use serde::{Deserialize, Serialize};

use crate::error::{sql, StoreError};
use crate::{now, Store};

/// The event kind of a successful boot, with its [`LastBoot`] as data.
pub const BOOT_EVENT: &str = "boot";

/// A transition that failed: which step, why, and what to do. Kept on the box until its
/// next state change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionFailure {
    /// The transition that failed (`start`, `stop`, `pause`, `snapshot`, …).
    pub transition: String,
    /// The step of it that failed (`template`, `rootfs`, `egress`, `runtime_start`, …).
    pub step: String,
    /// The whole cause chain, as the daemon logged it.
    pub cause: String,
    /// What the owner of the box can do about it.
    pub hint: String,
}

/// Who measured a boot phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseSource {
    /// The daemon, around the runtime call (`plan`, `runtime_start`, …).
    Daemon,
    /// The runtime backend, inside its start (its phases add up to at most `runtime_start`).
    Runtime,
}

/// One measured step of a boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootPhase {
    pub name: String,
    pub micros: u64,
    pub source: PhaseSource,
}

/// How the box's last successful boot went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastBoot {
    /// When the wake began, milliseconds since the Unix epoch; `None` for a boot recorded
    /// by a daemon older than this field.
    #[serde(default)]
    pub began_at_ms: Option<u64>,
    /// From the wake's start to the box recorded running.
    pub total_micros: u64,
    /// Whether it was a restore from a snapshot (else a cold start).
    pub restored: bool,
    /// In the order they ran: the daemon's, then the runtime's own.
    pub phases: Vec<BootPhase>,
}

impl Store {
    /// Records a transition of the box that failed without changing its state (a pause or a
    /// snapshot the runtime refused half-way: the box runs on).
    pub fn record_failure(
        &self,
        id: &BoxId,
        failure: &TransitionFailure,
    ) -> Result<(), StoreError> {
        let failure = failure.to_json().to_string();
        let n = self.db.write(|tx| {
            tx.execute(
                "UPDATE boxes SET failure = ?1 WHERE id = ?2",
                crate::args![failure, id.as_str()],
            )
            .map_err(sql("record a failed transition"))
        })?;
        if n == 0 {
            return Err(StoreError::BoxNotFound { id: id.clone() });
        }
        Ok(())
    }

    /// Keeps the running boot's token (a restarted daemon reattaches with it) and `boot` as
    /// the box's last boot, and appends `boot` to the box's event log as a [`BOOT_EVENT`]:
    /// one transaction, so a start pays for one fsync'd commit after its state write, not two.
    /// The token is cleared by every change to a state other than running or paused, and is
    /// a secret: the database lives in the data directory (mode 0700, root's).
    pub fn record_boot(
        &self,
        id: &BoxId,
        boot_token: &str,
        boot: &LastBoot,
    ) -> Result<(), StoreError> {
        let data = boot.to_json();
        let seq = self.db.write(|tx| {
            let n = tx
                .execute(
                    "UPDATE boxes SET boot_token = ?1, last_boot = ?2 WHERE id = ?3",
                    crate::args![boot_token, data.to_string(), id.as_str()],
                )
                .map_err(sql("record a box's boot"))?;
            if n == 0 {
                return Err(StoreError::BoxNotFound { id: id.clone() });
            }
            let seq = crate::events::last_seq(tx, id)? + 1;
            crate::events::insert(tx, id, seq, BOOT_EVENT, &data, now())?;
            Ok(seq)
        })?;
        self.notify_appended(id, seq);
        Ok(())
    }
}

impl TransitionFailure {
    /// The failure as the `failure` column and the state event keep it.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "transition": self.transition,
            "step": self.step,
            "cause": self.cause,
            "hint": self.hint,
        })
    }
}

impl LastBoot {
    /// The boot as the `last_boot` column and the boot event keep it.
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let phases: Vec<serde_json::Value> = self
            .phases
            .iter()
            .map(|p| {
                let source = match p.source {
                    PhaseSource::Daemon => "daemon",
                    PhaseSource::Runtime => "runtime",
                };
                serde_json::json!({"name": p.name, "micros": p.micros, "source": source})
            })
            .collect();
        serde_json::json!({
            "began_at_ms": self.began_at_ms,
            "total_micros": self.total_micros,
            "restored": self.restored,
            "phases": phases,
        })
    }
}

/// A stored JSON column read back; a value this daemon cannot read (written by a newer
/// one) reads as absent rather than failing the whole row.
pub(crate) fn parse_column<T: for<'de> Deserialize<'de>>(text: Option<String>) -> Option<T> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}
