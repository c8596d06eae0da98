//! The wakeup limits, the scheduler's doorbell and its clock, shared through the daemon's
//! `Ctx`.

use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use super::clock::{SystemClock, WakeupClock};
use super::config::WakeupsHostConfig;

/// The limits, the scheduler's doorbell, and the clock.
#[derive(Debug)]
pub struct Wakeups {
    config: WakeupsHostConfig,
    changed: Notify,
    /// Set only by a test that drives time itself; else the wall clock.
    driven: OnceLock<Arc<dyn WakeupClock>>,
}

impl Wakeups {
    pub fn new(config: &WakeupsHostConfig) -> Arc<Wakeups> {
        Arc::new(Wakeups {
            config: config.clone(),
            changed: Notify::new(),
            driven: OnceLock::new(),
        })
    }

    pub fn config(&self) -> &WakeupsHostConfig {
        &self.config
    }

    /// Now, Unix milliseconds, as the wakeups see it.
    pub fn now_ms(&self) -> i64 {
        match self.driven.get() {
            Some(clock) => clock.now_ms(),
            None => SystemClock.now_ms(),
        }
    }

    /// Makes the wakeups read `clock` from now on (a test's simulated time; the scheduler
    /// looks again when [`Wakeups::changed`] rings). Once only: `false` if a clock was set.
    pub fn drive_clock(&self, clock: Arc<dyn WakeupClock>) -> bool {
        let set = self.driven.set(clock).is_ok();
        self.changed();
        set
    }

    /// Rings when a wakeup was added or cancelled (the soonest slot may have changed), or
    /// the clock was moved.
    pub(super) fn bell(&self) -> &Notify {
        &self.changed
    }

    pub fn changed(&self) {
        self.changed.notify_one();
    }
}
