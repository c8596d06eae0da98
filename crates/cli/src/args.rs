//! What several commands take and build alike: a box's API path, who runs a command in
//! the box, `K=V` pairs, durations, limits, and the exit statuses a command's end maps to.

use berth_protocol::guest::BoxUser;
use berth_protocol::ErrorCode;
use clap::ValueEnum;
use serde::Serialize;

use crate::client::path_segment;

/// Exit status when the command ran out of time (as timeout(1) does).
pub const EXIT_TIMED_OUT: u8 = 124;
/// Exit status when the command could not be found (as a shell does).
pub const EXIT_NOT_FOUND: u8 = 127;
/// `/v1/boxes/{ref}{suffix}`.
pub fn box_path(name: &str, suffix: &str) -> String {
    format!("/v1/boxes/{}{suffix}", path_segment(name))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UserArg {
    User,
    Root,
}

impl From<UserArg> for BoxUser {
    fn from(user: UserArg) -> BoxUser {
        match user {
            UserArg::User => BoxUser::User,
            UserArg::Root => BoxUser::Root,
        }
    }
}

/// `K=V` (the value may hold `=` and be empty).
pub fn parse_env(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("expected K=V, got {raw:?}")),
    }
}

#[derive(Debug, Serialize, PartialEq)]
pub struct LimitsBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    memory_mib: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pids: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpus: Option<f64>,
}

impl LimitsBody {
    /// The limits given, or `None` when none is.
    pub fn of(memory_mib: Option<u64>, pids: Option<u64>, cpus: Option<f64>) -> Option<Self> {
        (memory_mib.is_some() || pids.is_some() || cpus.is_some()).then_some(LimitsBody {
            memory_mib,
            pids,
            cpus,
        })
    }
}

/// Seconds from `90`, `90s`, `30m`, `2h` or `1d`.
/// A box's sleep ladder as flags: each rung an idle time (`0` or `never`: off), and whether
/// calls wake a sleeping box. Absent flags keep what the box (or its template) has.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SleepArgs {
    /// Idle time before the box is paused (frozen in memory; resumes in milliseconds):
    /// seconds, or 90s, 30m, 2h, 1d; 0 or never: off.
    #[arg(long, value_name = "DURATION", value_parser = parse_rung)]
    pub pause_after: Option<u64>,
    /// Idle time before the box is snapshotted (memory saved to disk, no RAM held; VM
    /// runtimes only); 0 or never: off.
    #[arg(long, value_name = "DURATION", value_parser = parse_rung)]
    pub snapshot_after: Option<u64>,
    /// Idle time before the box is stopped (processes end, files stay); 0 or never: off.
    /// Work keeps a box awake: a message, exec, file call, terminal or background process;
    /// an open event stream does not.
    #[arg(long, value_name = "DURATION", value_parser = parse_rung)]
    pub stop_after: Option<u64>,
    /// Whether a call (exec, files, a message) wakes a paused or snapshotted box: true
    /// (the default) or false (calls are refused until `berth box resume`).
    #[arg(long, value_name = "BOOL")]
    pub auto_resume: Option<bool>,
}

/// The ladder's fields of a create or change body; absent ones are left out.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq)]
pub struct SleepBody {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pause_after_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_after_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_after_s: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<bool>,
}

impl SleepArgs {
    pub fn body(&self) -> SleepBody {
        SleepBody {
            pause_after_s: self.pause_after,
            snapshot_after_s: self.snapshot_after,
            stop_after_s: self.stop_after,
            auto_resume: self.auto_resume,
        }
    }
}

/// A rung's idle time: a duration, or `never` for off (as `0`).
pub fn parse_rung(raw: &str) -> Result<u64, String> {
    match raw {
        "never" | "off" => Ok(0),
        _ => parse_duration_s(raw),
    }
}

pub fn parse_duration_s(raw: &str) -> Result<u64, String> {
    let bad = || format!("expected seconds or a duration like 90s, 30m, 2h, 1d; got {raw:?}");
    let (digits, unit) = match raw.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => raw.split_at(at),
        None => (raw, "s"),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).ok_or_else(bad)
}

/// The program could not run (an `error` frame from the box).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ExecFailed {
    pub code: ErrorCode,
    pub message: String,
}

impl ExecFailed {
    pub fn exit_status(&self) -> u8 {
        match self.code {
            ErrorCode::NotFound => EXIT_NOT_FOUND,
            _ => 1,
        }
    }
}
