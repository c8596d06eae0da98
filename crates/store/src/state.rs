//! The box state machine (ARCHITECTURE.md, "Box states").
//!
//! ```text
//! stopped → starting → running → stopping → stopped
//!           starting → failed      running ⇄ paused
//! failed → starting                any → deleted (terminal)
//! ```
//! Paths to `stopped` that skip `stopping` exist for crash recovery: a box found `starting`,
//! `running` or `paused` after a daemon restart (or whose processes died) is `stopped`.

use std::fmt;
use std::str::FromStr;

/// What the store records about a box's lifecycle. `Deleted` is only ever a transition
/// target: a deleted box has no row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BoxState {
    Stopped,
    Starting,
    Running,
    Stopping,
    /// Frozen in memory: every process stopped where it was, its RAM still held.
    Paused,
    /// Saved to disk (memory and device state next to the volume), holding no RAM: the
    /// next wake restores it with every process as it was.
    Snapshotted,
    /// The last start or stop failed; the box's `state_reason` says why.
    Failed,
    Deleted,
}

/// A state change the machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a box cannot go from {from} to {to}")]
pub struct InvalidTransition {
    pub from: BoxState,
    pub to: BoxState,
}

/// A stored state string that is not a [`BoxState`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a box state")]
pub struct UnknownState {
    pub value: String,
}

impl BoxState {
    pub const ALL: [BoxState; 8] = [
        BoxState::Stopped,
        BoxState::Starting,
        BoxState::Running,
        BoxState::Stopping,
        BoxState::Paused,
        BoxState::Snapshotted,
        BoxState::Failed,
        BoxState::Deleted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            BoxState::Stopped => "stopped",
            BoxState::Starting => "starting",
            BoxState::Running => "running",
            BoxState::Stopping => "stopping",
            BoxState::Paused => "paused",
            BoxState::Snapshotted => "snapshotted",
            BoxState::Failed => "failed",
            BoxState::Deleted => "deleted",
        }
    }

    /// Whether some process of the box may exist (the runtime must be asked to stop it).
    pub fn may_have_processes(self) -> bool {
        match self {
            BoxState::Starting | BoxState::Running | BoxState::Stopping | BoxState::Paused => true,
            BoxState::Stopped | BoxState::Snapshotted | BoxState::Failed | BoxState::Deleted => {
                false
            }
        }
    }
}

/// The one place that says which state changes are legal.
pub fn check_transition(from: BoxState, to: BoxState) -> Result<(), InvalidTransition> {
    use BoxState::*;
    let allowed = match from {
        Stopped => matches!(to, Starting | Deleted),
        Starting => matches!(to, Running | Failed | Stopped | Deleted),
        Running => matches!(
            to,
            Stopping | Paused | Snapshotted | Failed | Stopped | Deleted
        ),
        Stopping => matches!(to, Stopped | Failed | Deleted),
        Paused => matches!(
            to,
            Running | Snapshotted | Stopping | Stopped | Failed | Deleted
        ),
        // A restore goes through `starting` like a cold boot (the same quota check); a
        // stop only deletes the snapshot.
        Snapshotted => matches!(to, Starting | Stopped | Failed | Deleted),
        Failed => matches!(to, Starting | Stopped | Deleted),
        Deleted => false,
    };
    if allowed {
        Ok(())
    } else {
        Err(InvalidTransition { from, to })
    }
}

impl fmt::Display for BoxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BoxState {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, UnknownState> {
        BoxState::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or_else(|| UnknownState {
                value: s.to_owned(),
            })
    }
}

impl serde::Serialize for BoxState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use BoxState::*;

    #[test]
    fn the_documented_lifecycle_is_legal() {
        for (from, to) in [
            (Stopped, Starting),
            (Starting, Running),
            (Running, Stopping),
            (Stopping, Stopped),
            (Running, Paused),
            (Paused, Running),
            (Running, Snapshotted),
            (Paused, Snapshotted),
            (Snapshotted, Starting),
            (Snapshotted, Stopped),
            (Starting, Failed),
            (Failed, Starting),
        ] {
            assert_eq!(check_transition(from, to), Ok(()), "{from} → {to}");
        }
    }

    #[test]
    fn every_live_state_can_be_deleted_and_deleted_is_terminal() {
        for from in BoxState::ALL {
            if from != Deleted {
                assert!(check_transition(from, Deleted).is_ok(), "{from}");
            }
            assert!(check_transition(Deleted, from).is_err(), "deleted → {from}");
        }
    }

    #[test]
    fn illegal_changes_are_typed_errors() {
        assert_eq!(
            check_transition(Stopped, Running),
            Err(InvalidTransition {
                from: Stopped,
                to: Running
            })
        );
        assert!(check_transition(Stopped, Paused).is_err());
        assert!(check_transition(Failed, Running).is_err());
        for state in BoxState::ALL {
            assert!(check_transition(state, state).is_err(), "{state} → itself");
        }
    }

    #[test]
    fn states_round_trip_through_text() {
        for state in BoxState::ALL {
            assert_eq!(state.as_str().parse::<BoxState>(), Ok(state));
        }
        assert!("sleeping".parse::<BoxState>().is_err());
    }
}
