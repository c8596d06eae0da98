//! Box transitions and wakes, counted where they happen: every state write of a box goes
//! through `lifecycle::transition::Transition`, which reports each one here
//! ([`LifecycleMetrics::transition`]); a wake reports how long its caller waited
//! ([`LifecycleMetrics::woke`]).
//!
//! A transition's time is from the moment its [`Transition`](crate::lifecycle) held the
//! box's lock (or wrote the state before, for the second write of one run) to the write:
//! `stopped→starting` is the lock-to-admission step, `starting→running` the boot itself,
//! `running→paused` the freeze. A wake's time is from the call that needs the box (before
//! it waits for the box's lock) to the box running.

use std::time::Duration;

use berth_store::{check_transition, BoxState};

use berth_basics::Histogram;

use super::exposition::{Exposition, Kind};

/// Upper bounds of the lifecycle's histograms, in seconds (Prometheus' `le`): from a thaw
/// (milliseconds) to a VM's cold boot or snapshot (seconds to a minute).
pub const BUCKETS_S: [f64; 14] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The rung a box woke from, as `berth_box_wake_seconds{from}` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeFrom {
    /// A cold start: a stopped or failed box, or one found half-started.
    Stopped,
    /// Thawed in memory.
    Paused,
    /// Restored from its snapshot (or cold-started when the restore failed).
    Snapshotted,
}

impl WakeFrom {
    const ALL: [WakeFrom; 3] = [WakeFrom::Stopped, WakeFrom::Paused, WakeFrom::Snapshotted];

    fn as_str(self) -> &'static str {
        match self {
            WakeFrom::Stopped => "stopped",
            WakeFrom::Paused => "paused",
            WakeFrom::Snapshotted => "snapshotted",
        }
    }

    fn index(self) -> usize {
        match self {
            WakeFrom::Stopped => 0,
            WakeFrom::Paused => 1,
            WakeFrom::Snapshotted => 2,
        }
    }
}

/// Where a state is in [`BoxState::ALL`].
fn index(state: BoxState) -> usize {
    match state {
        BoxState::Stopped => 0,
        BoxState::Starting => 1,
        BoxState::Running => 2,
        BoxState::Stopping => 3,
        BoxState::Paused => 4,
        BoxState::Snapshotted => 5,
        BoxState::Failed => 6,
        BoxState::Deleted => 7,
    }
}

const STATES: usize = BoxState::ALL.len();

#[derive(Debug)]
pub struct LifecycleMetrics {
    /// By `from`, then `to`; the counter is each one's count.
    transitions: [[Histogram; STATES]; STATES],
    wakes: [Histogram; 3],
}

impl Default for LifecycleMetrics {
    fn default() -> Self {
        let histogram = |_| Histogram::new(&BUCKETS_S);
        LifecycleMetrics {
            transitions: std::array::from_fn(|_| std::array::from_fn(histogram)),
            wakes: std::array::from_fn(histogram),
        }
    }
}

impl LifecycleMetrics {
    /// The box went from `from` to `to`, which took `took`.
    pub fn transition(&self, from: BoxState, to: BoxState, took: Duration) {
        self.transitions[index(from)][index(to)].observe(took);
    }

    /// A caller waited `took` for the box to wake from `from`.
    pub fn woke(&self, from: WakeFrom, took: Duration) {
        self.wakes[from.index()].observe(took);
    }

    /// One series per transition the state machine allows, whether it happened yet or not.
    pub(super) fn write(&self, out: &mut Exposition) {
        let legal = || {
            BoxState::ALL.into_iter().flat_map(|from| {
                BoxState::ALL
                    .into_iter()
                    .filter(move |to| check_transition(from, *to).is_ok())
                    .map(move |to| (from, to))
            })
        };
        let snapshots: Vec<_> = legal()
            .map(|(from, to)| {
                let labels = [("from", from.as_str()), ("to", to.as_str())];
                (labels, self.transitions[index(from)][index(to)].snapshot())
            })
            .collect();
        out.family(
            "berth_box_transitions_total",
            Kind::Counter,
            "Box state changes written, by the state left and the state entered.",
        );
        for (labels, snapshot) in &snapshots {
            out.sample("berth_box_transitions_total", labels, snapshot.count());
        }
        out.family(
            "berth_box_transition_seconds",
            Kind::Histogram,
            "How long each box state change took: from the transition taking the box's lock, or from its previous write, to this one.",
        );
        for (labels, snapshot) in &snapshots {
            out.histogram("berth_box_transition_seconds", labels, snapshot);
        }
        out.family(
            "berth_box_wake_seconds",
            Kind::Histogram,
            "How long a call that needed a box waited for it to wake, by the rung it woke from: stopped (cold start), paused (thaw), snapshotted (restore).",
        );
        for from in WakeFrom::ALL {
            let snapshot = self.wakes[from.index()].snapshot();
            out.histogram(
                "berth_box_wake_seconds",
                &[("from", from.as_str())],
                &snapshot,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_its_own_index() {
        let mut seen = [false; STATES];
        for state in BoxState::ALL {
            assert_eq!(BoxState::ALL[index(state)], state);
            seen[index(state)] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn only_legal_transitions_are_shown_and_each_counts_its_own() {
        let m = LifecycleMetrics::default();
        m.transition(
            BoxState::Stopped,
            BoxState::Starting,
            Duration::from_millis(2),
        );
        m.transition(
            BoxState::Starting,
            BoxState::Running,
            Duration::from_millis(700),
        );
        m.transition(
            BoxState::Starting,
            BoxState::Running,
            Duration::from_millis(800),
        );
        m.woke(WakeFrom::Paused, Duration::from_millis(3));
        let mut out = Exposition::default();
        m.write(&mut out);
        let text = out.finish();
        let has = |line: &str| text.lines().any(|l| l == line);
        assert!(has(
            r#"berth_box_transitions_total{from="stopped",to="starting"} 1"#
        ));
        assert!(has(
            r#"berth_box_transitions_total{from="starting",to="running"} 2"#
        ));
        assert!(has(
            r#"berth_box_transitions_total{from="running",to="paused"} 0"#
        ));
        assert!(
            !text.contains(r#"from="stopped",to="running""#),
            "not a legal move"
        );
        assert!(
            !text.contains(r#"from="deleted""#),
            "nothing leaves deleted"
        );
        assert!(has(
            r#"berth_box_transition_seconds_bucket{from="starting",to="running",le="0.5"} 0"#
        ));
        assert!(has(
            r#"berth_box_transition_seconds_bucket{from="starting",to="running",le="1"} 2"#
        ));
        assert!(has(r#"berth_box_wake_seconds_count{from="paused"} 1"#));
        assert!(has(r#"berth_box_wake_seconds_count{from="snapshotted"} 0"#));
    }
}
