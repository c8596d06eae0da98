//! Why a wakeup request is refused (its HTTP status is in `api/error.rs`).

/// Why a wakeup request is refused.
#[derive(Debug, thiserror::Error)]
pub enum WakeupError {
    #[error("give exactly one of `at` (RFC 3339), `in_s` (seconds) or `cron` (5 fields)")]
    ScheduleCount,
    #[error("`tz` goes with `cron` only (`at` carries its own offset)")]
    TzWithoutCron,
    #[error("`at` {value:?} is not an RFC 3339 time like 2026-12-02T09:00:00+01:00")]
    BadTime {
        value: String,
        #[source]
        source: time::error::Parse,
    },
    #[error("`at` {at:?} is in the past")]
    InPast { at: String },
    #[error("a wakeup set from inside a box is at least {min_delay_s} s away (`[wakeups] box_min_delay_s` in berth.toml)")]
    TooSoon { min_delay_s: u64 },
    #[error("a wakeup is at most {max_s} s (about ten years) away")]
    TooFar { max_s: u64 },
    #[error("cron {expr:?} must have 5 fields: minute hour day-of-month month day-of-week")]
    CronFields { expr: String },
    #[error("invalid cron {expr:?}")]
    BadCron {
        expr: String,
        #[source]
        source: croner::errors::CronError,
    },
    #[error("cron {expr:?} never fires")]
    CronNeverFires { expr: String },
    #[error("unknown time zone {tz:?}: give an IANA name like Europe/Paris or UTC")]
    BadTz { tz: String },
    #[error("cron {expr:?} fires more often than every {min_interval_s} s (`[wakeups] cron_min_interval_s` in berth.toml; `box_min_delay_s` for a box's own)")]
    CronTooOften { expr: String, min_interval_s: u64 },
    #[error("a wakeup's `message` must not be empty")]
    EmptyMessage,
    #[error("a wakeup's `message` is at most {limit_bytes} bytes")]
    MessageTooLarge { limit_bytes: u64 },
    #[error("box {name} already has {max} pending wakeups (`[wakeups] max_pending_per_box` in berth.toml); cancel one first")]
    TooManyPending { name: String, max: u64 },
    #[error("box {name} set {max} wakeups from inside within the last hour (`[wakeups] box_max_per_hour` in berth.toml); try again later")]
    TooManyPerHour { name: String, max: u64 },
    #[error("box {name} already has {max} crons set from inside (`[wakeups] box_max_crons` in berth.toml); cancel one first (`berth-wake ls`, `berth-wake rm ID`)")]
    TooManyCrons { name: String, max: u64 },
    #[error("box {name} has no wakeup {id:?}")]
    NotFound { name: String, id: String },
}
