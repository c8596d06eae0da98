//! Timing a start step by step: each step ends with a [`PhaseClock::lap`] that names it, so
//! the steps tile the start with no gap and their sum is the start's whole time on the
//! host. berth-init's own phases (from its `info` answer) follow, prefixed `init_`: they
//! run inside the host's `guest_ready` step, not after it.

use std::time::Instant;

use berth_protocol::guest;

use crate::{BootPhase, BootPhases};

/// Laps of one start, in the order they ran.
#[derive(Debug)]
pub(crate) struct PhaseClock {
    phases: Vec<BootPhase>,
    last: Instant,
}

impl PhaseClock {
    pub(crate) fn start() -> PhaseClock {
        PhaseClock {
            phases: Vec::new(),
            last: Instant::now(),
        }
    }

    /// Records the time since the previous lap (or the start) as step `name`.
    pub(crate) fn lap(&mut self, name: &str) {
        let now = Instant::now();
        let micros = u64::try_from((now - self.last).as_micros()).unwrap_or(u64::MAX);
        self.phases.push(BootPhase {
            name: name.to_owned(),
            micros,
        });
        self.last = now;
    }

    /// Appends berth-init's phases as `init_<name>`.
    pub(crate) fn append_init(&mut self, phases: &[guest::BootPhase]) {
        self.phases.extend(phases.iter().map(|p| BootPhase {
            name: format!("init_{}", p.name),
            micros: p.duration_us,
        }));
    }

    pub(crate) fn finish(self) -> BootPhases {
        BootPhases(self.phases)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laps_tile_the_start_and_init_phases_follow_prefixed() {
        let started = Instant::now();
        let mut clock = PhaseClock::start();
        clock.lap("volume_check");
        std::thread::sleep(std::time::Duration::from_millis(2));
        clock.lap("bundle");
        let whole = started.elapsed();
        clock.append_init(&[guest::BootPhase {
            name: "seal".into(),
            duration_us: 70,
        }]);
        let phases = clock.finish().0;
        let names: Vec<_> = phases.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["volume_check", "bundle", "init_seal"]);
        assert!(phases[1].micros >= 2000, "{phases:?}");
        let host: u64 = phases[..2].iter().map(|p| p.micros).sum();
        assert!(host <= u64::try_from(whole.as_micros()).unwrap());
        assert_eq!(phases[2].micros, 70);
    }
}
