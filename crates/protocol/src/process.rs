//! Processes that outlive their request, and what keeps a box awake (protocol version 3).
//!
//! | call | method and path | request | response |
//! |---|---|---|---|
//! | [`crate::guest::Call::ProcessStart`] | `POST /v1/processes` | [`ProcessRequest`] | [`ProcessInfo`] |
//! | [`crate::guest::Call::ProcessList`] | `GET /v1/processes` | - | [`ProcessList`] |
//! | [`crate::guest::Call::ProcessOutput`] | `GET /v1/processes/{id}/output?offset=N` | - | NDJSON of [`ProcessFrame`] |
//! | [`crate::guest::Call::ProcessStdin`] | `POST /v1/processes/{id}/stdin?close=true` | the bytes | 204 |
//! | [`crate::guest::Call::ProcessSignal`] | `POST /v1/processes/{id}/signal` | [`crate::terminal::SignalRequest`] | 204 |
//! | [`crate::guest::Call::Busy`] | `GET /v1/busy` | - | [`Busy`] |
//!
//! A process started here is not tied to any connection: it runs until it exits (or its
//! timeout), whoever watches. Its stdout and stderr go into one numbered output (offsets
//! count the bytes of both, in the order they came); `berth-init` keeps the last
//! [`PROCESS_TAIL_BYTES`] of it, so a reader that reconnects with the offset it reached
//! resumes there (a frame's `offset` shows a gap when the tail no longer holds it). The
//! output stream ends with one `exit` frame once the process has exited and everything
//! kept is sent. A process's exit is also a `process_exit` event on the box's event stream.
//! Stdin is a pipe only when asked for (`open_stdin`); a writer streams bytes to it, one
//! writer at a time, and may close it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::guest::{BoxUser, ExecRequest};

/// Output kept per process.
pub const PROCESS_TAIL_BYTES: usize = 512 * 1024;
/// Processes one box's agent keeps (running, or exited and not yet forgotten; the oldest
/// exited one is forgotten to make room).
pub const MAX_PROCESSES: usize = 32;

/// Body of `POST /v1/processes`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessRequest {
    /// The command, as for exec; its `stdin` text, if any, is written first.
    #[serde(flatten)]
    pub exec: ExecRequest,
    /// Whether the running process keeps the box awake (default: it does).
    #[serde(default = "yes")]
    pub keep_awake: bool,
    /// Keep stdin open as a pipe for `POST …/stdin` (default: stdin is empty).
    #[serde(default)]
    pub open_stdin: bool,
    /// The caller's name for the process (E2B's `tag`), at most [`MAX_TAG_BYTES`]
    /// (version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// The longest process or terminal tag.
pub const MAX_TAG_BYTES: usize = 256;

fn yes() -> bool {
    true
}

/// A process as the agent knows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessInfo {
    /// `pr_` and 16 hex digits, unique within one boot.
    pub id: String,
    pub pid: u32,
    pub argv: Vec<String>,
    #[serde(default)]
    pub user: BoxUser,
    /// Milliseconds since the Unix epoch.
    #[serde(default)]
    pub started_at_ms: u64,
    #[serde(default)]
    pub keep_awake: bool,
    /// Whether its stdin is still open for writing.
    #[serde(default)]
    pub stdin_open: bool,
    /// The offset just past the last output byte.
    #[serde(default)]
    pub output_end: u64,
    /// Present once the process has exited.
    #[serde(default)]
    pub exit: Option<ProcessExit>,
    /// What the request set (version 5): its tag, working directory and the variables it
    /// added to the base environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessExit {
    /// The exit code, or `None` when a signal ended the process.
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    #[serde(default)]
    pub timed_out: bool,
}

impl ProcessExit {
    /// The status a shell would report: the code, or 128 + the signal.
    pub fn shell_status(&self) -> i32 {
        self.code.unwrap_or_else(|| 128 + self.signal.unwrap_or(0))
    }
}

/// Answer to `GET /v1/processes`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessList {
    pub processes: Vec<ProcessInfo>,
}

/// Which output a chunk came from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputStream {
    Stdout,
    Stderr,
    #[serde(other)]
    Unknown,
}

/// One line of `GET /v1/processes/{id}/output`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ProcessFrame {
    Output {
        stream: OutputStream,
        /// The offset of `data`'s first byte in the process's output.
        offset: u64,
        #[serde(with = "crate::guest::base64_bytes")]
        #[cfg_attr(feature = "openapi", schema(value_type = String, format = Byte))]
        data: Vec<u8>,
    },
    Exit {
        #[serde(flatten)]
        exit: ProcessExit,
        /// The offset just past the last output byte.
        output_end: u64,
    },
    #[serde(other)]
    Unknown,
}

/// Work inside the box that keeps it awake, as `berth-init` sees it. The host's idle
/// reclaimer asks before it stops a box that no call has used for its idle timeout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Busy {
    /// Terminals attached now, or detached and still within their grace period.
    #[serde(default)]
    pub terminals: u32,
    /// Background processes running that asked to keep the box awake.
    #[serde(default)]
    pub processes: u32,
    /// Services running that say `keep_awake` (version 7; not written when 0, so the
    /// version-3 answer is unchanged).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub services: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Busy {
    pub fn is_busy(&self) -> bool {
        self.terminals > 0 || self.processes > 0 || self.services > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn version_3_process_schema_is_frozen() {
        let req: ProcessRequest =
            serde_json::from_value(json!({"argv":["sleep","9"],"open_stdin":true})).unwrap();
        assert!(req.keep_awake && req.open_stdin);
        assert_eq!(req.exec.argv, ["sleep", "9"]);
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"argv":["sleep","9"],"env":{},"cwd":null,"user":"user","stdin":null,"timeout_ms":null,"keep_awake":true,"open_stdin":true})
        );
        let frames = [
            (
                ProcessFrame::Output {
                    stream: OutputStream::Stderr,
                    offset: 7,
                    data: b"hi".to_vec(),
                },
                json!({"type":"output","stream":"stderr","offset":7,"data":"aGk="}),
            ),
            (
                ProcessFrame::Exit {
                    exit: ProcessExit {
                        code: Some(1),
                        signal: None,
                        timed_out: false,
                    },
                    output_end: 9,
                },
                json!({"type":"exit","code":1,"signal":null,"timed_out":false,"output_end":9}),
            ),
        ];
        for (frame, value) in frames {
            assert_eq!(serde_json::to_value(&frame).unwrap(), value);
            assert_eq!(
                serde_json::from_value::<ProcessFrame>(value).unwrap(),
                frame
            );
        }
        let info = ProcessInfo {
            id: "pr_0123456789abcdef".into(),
            pid: 4,
            argv: vec!["x".into()],
            user: BoxUser::User,
            started_at_ms: 5,
            keep_awake: false,
            stdin_open: true,
            output_end: 3,
            exit: None,
            tag: None,
            cwd: None,
            env: BTreeMap::new(),
        };
        assert_eq!(
            serde_json::to_value(&info).unwrap(),
            json!({"id":"pr_0123456789abcdef","pid":4,"argv":["x"],"user":"user","started_at_ms":5,"keep_awake":false,"stdin_open":true,"output_end":3,"exit":null})
        );
    }

    #[test]
    fn version_3_busy_schema_is_frozen() {
        let busy = Busy {
            terminals: 1,
            processes: 2,
            services: 0,
        };
        assert_eq!(
            serde_json::to_value(busy).unwrap(),
            json!({"terminals":1,"processes":2})
        );
        assert!(busy.is_busy());
        assert!(!serde_json::from_value::<Busy>(json!({})).unwrap().is_busy());
    }
}
