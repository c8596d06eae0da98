//! The wakeups' time: when a wakeup is made (its first slot), which slots are due, and the
//! hour the per-hour limit looks back over. The wall clock, unless a test drives its own
//! ([`Wakeups::drive_clock`](super::doorbell::Wakeups::drive_clock)) to run a simulated hour
//! in seconds: it then moves the clock and rings the scheduler's doorbell.

use time::OffsetDateTime;

/// Where the wakeups read the time.
pub trait WakeupClock: Send + Sync + std::fmt::Debug {
    /// Now, Unix milliseconds.
    fn now_ms(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WakeupClock for SystemClock {
    fn now_ms(&self) -> i64 {
        (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
    }
}
