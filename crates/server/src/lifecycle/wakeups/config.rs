//! `[wakeups]` of berth.toml: how far a box may schedule itself.
//!
//! ```toml
//! [wakeups]
//! # Wakeups one box may have pending (set by anyone).
//! max_pending_per_box = 32
//! # A wakeup set from inside a box (berth-wake) is at least this far away, and its cron
//! # slots at least this far apart.
//! box_min_delay_s = 60
//! # Slots of the wakeups a box set from inside that fire per hour (a slot past it is
//! # skipped, not queued); also the wakeups it may set per hour (cancelled ones count).
//! box_max_per_hour = 60
//! # Crons a box may have that it set from inside.
//! box_max_crons = 4
//! # Cron slots of any wakeup are at least this far apart.
//! cron_min_interval_s = 60
//! ```

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WakeupsHostConfig {
    #[serde(default = "default_max_pending_per_box")]
    pub max_pending_per_box: u64,
    #[serde(default = "default_box_min_delay_s")]
    pub box_min_delay_s: u64,
    #[serde(default = "default_box_max_per_hour")]
    pub box_max_per_hour: u64,
    #[serde(default = "default_box_max_crons")]
    pub box_max_crons: u64,
    #[serde(default = "default_cron_min_interval_s")]
    pub cron_min_interval_s: u64,
}

impl Default for WakeupsHostConfig {
    fn default() -> Self {
        WakeupsHostConfig {
            max_pending_per_box: default_max_pending_per_box(),
            box_min_delay_s: default_box_min_delay_s(),
            box_max_per_hour: default_box_max_per_hour(),
            box_max_crons: default_box_max_crons(),
            cron_min_interval_s: default_cron_min_interval_s(),
        }
    }
}

fn default_max_pending_per_box() -> u64 {
    32
}

fn default_box_min_delay_s() -> u64 {
    60
}

fn default_box_max_per_hour() -> u64 {
    60
}

/// A few routines (a morning check, a nightly summary) without letting a box fill the
/// scheduler with its own crons.
fn default_box_max_crons() -> u64 {
    4
}

fn default_cron_min_interval_s() -> u64 {
    60
}

impl WakeupsHostConfig {
    /// `(key, value, min, max)` of each limit, checked when berth.toml is read.
    pub(crate) fn limits(&self) -> [(&'static str, u64, u64, u64); 5] {
        [
            (
                "[wakeups] max_pending_per_box",
                self.max_pending_per_box,
                1,
                100_000,
            ),
            ("[wakeups] box_min_delay_s", self.box_min_delay_s, 0, 86_400),
            (
                "[wakeups] box_max_per_hour",
                self.box_max_per_hour,
                1,
                100_000,
            ),
            // 0: a box makes no crons of its own.
            ("[wakeups] box_max_crons", self.box_max_crons, 0, 100_000),
            // 5-field cron never fires twice within a minute anyway.
            (
                "[wakeups] cron_min_interval_s",
                self.cron_min_interval_s,
                60,
                86_400,
            ),
        ]
    }
}
