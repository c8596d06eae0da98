//! Terminals (protocol version 3): a command on a new PTY in the box, which outlives the
//! connection that watches it.
//!
//! | call | method and path | request | response |
//! |---|---|---|---|
//! | [`crate::guest::Call::TerminalOpen`] | `POST /v1/terminals` | [`TerminalRequest`] | [`TerminalInfo`] |
//! | [`crate::guest::Call::TerminalList`] | `GET /v1/terminals` (version 5) | - | [`TerminalList`] |
//! | [`crate::guest::Call::TerminalGet`] | `GET /v1/terminals/{id}` | - | [`TerminalInfo`] |
//! | [`crate::guest::Call::TerminalAttach`] | `GET /v1/terminals/{id}/attach?offset=N`, `Upgrade: berth-terminal` | - | `101`, then raw bytes both ways |
//! | [`crate::guest::Call::TerminalResize`] | `POST /v1/terminals/{id}/resize` | [`TerminalSize`] | 204 |
//! | [`crate::guest::Call::TerminalSignal`] | `POST /v1/terminals/{id}/signal` | [`SignalRequest`] | 204 |
//!
//! **Output is numbered.** Every byte the program writes has an offset (the first is 0).
//! `berth-init` keeps the last [`TERMINAL_BUFFER_BYTES`] of it. An attachment starts at the
//! `offset` it asks for (by default where the previous attachment stopped being sent
//! bytes), or at the oldest byte still kept when that one is gone; the `101` says where in
//! [`OFFSET_HEADER`]. So a client that counts what it received and reattaches with that
//! count misses nothing and sees nothing twice.
//!
//! **The attached stream.** After the `101`, the client's bytes are the terminal's input;
//! the agent's bytes are its output. One attachment at a time: a new one ends the previous
//! (its stream closes). When the program has exited and its output is all sent, the agent
//! closes the stream; `GET /v1/terminals/{id}` then has the exit.
//!
//! **Detached.** While no one is attached the program runs on and its output is kept
//! (oldest dropped first); while someone is attached and reads slower than the program
//! writes, the program is held back (a real terminal's flow control) rather than output
//! lost. A terminal detached for longer than its grace period is hung up (`SIGHUP` to its
//! process group, `SIGKILL` shortly after); an ended terminal is forgotten after the same
//! grace.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::guest::BoxUser;

/// The `Upgrade` token of an attachment.
pub const TERMINAL_UPGRADE: &str = "berth-terminal";
/// Response header of the `101`: the offset of the first output byte the stream carries.
pub const OFFSET_HEADER: &str = "berth-offset";
/// Output kept per terminal for replay.
pub const TERMINAL_BUFFER_BYTES: usize = 1024 * 1024;
/// Terminals one box holds at once (running or ended and not yet forgotten).
pub const MAX_TERMINALS: usize = 16;
/// How long a detached terminal lives on, unless the request says otherwise.
pub const DEFAULT_GRACE_MS: u64 = 60_000;
/// The longest grace a request may ask for.
pub const MAX_GRACE_MS: u64 = 24 * 3600 * 1000;
/// `TERM` unless the request names one.
pub const DEFAULT_TERM: &str = "xterm-256color";

/// Body of `POST /v1/terminals`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TerminalRequest {
    /// Program and arguments; empty: the user's login shell.
    #[serde(default)]
    pub argv: Vec<String>,
    /// Added to the base environment, like an exec's.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Defaults to the box user's home, `/home/user` (for root too).
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub user: BoxUser,
    #[serde(flatten)]
    pub size: TerminalSize,
    /// `TERM`; defaults to [`DEFAULT_TERM`].
    #[serde(default)]
    pub term: Option<String>,
    /// How long the terminal lives on while detached; defaults to [`DEFAULT_GRACE_MS`].
    #[serde(default)]
    pub grace_ms: Option<u64>,
    /// The caller's name for the terminal, at most [`crate::process::MAX_TAG_BYTES`]
    /// (version 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// A window size in character cells.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    #[serde(default = "default_cols")]
    pub cols: u16,
    #[serde(default = "default_rows")]
    pub rows: u16,
}

impl Default for TerminalSize {
    fn default() -> Self {
        TerminalSize {
            cols: default_cols(),
            rows: default_rows(),
        }
    }
}

fn default_cols() -> u16 {
    80
}

fn default_rows() -> u16 {
    24
}

/// A terminal as the agent knows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalInfo {
    /// `tm_` and 16 hex digits, unique within one boot.
    pub id: String,
    pub pid: u32,
    pub argv: Vec<String>,
    #[serde(default)]
    pub user: BoxUser,
    pub size: TerminalSize,
    /// Whether a client is attached now.
    #[serde(default)]
    pub attached: bool,
    /// The offset just past the last output byte.
    #[serde(default)]
    pub output_end: u64,
    /// The offset of the oldest output byte still kept.
    #[serde(default)]
    pub output_start: u64,
    /// Present once the program has exited.
    #[serde(default)]
    pub exit: Option<TerminalExit>,
    /// What the request set (version 5): its tag, working directory and the variables it
    /// added to the base environment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// Answer to `GET /v1/terminals` (version 5): every terminal the agent holds.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalList {
    pub terminals: Vec<TerminalInfo>,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalExit {
    /// The exit code, or `None` when a signal ended the program.
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
}

impl TerminalExit {
    /// The status a shell would report: the code, or 128 + the signal.
    pub fn shell_status(&self) -> i32 {
        self.code.unwrap_or_else(|| 128 + self.signal.unwrap_or(0))
    }
}

/// A JSON control message a client sends on a terminal's WebSocket (`GET
/// /v1/boxes/{ref}/pty`), as a text frame beside the binary input:
/// `{"resize":{"cols","rows"}}` or `{"signal":"INT"}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientControl {
    /// The window's new size; the program gets `SIGWINCH`.
    Resize(TerminalSize),
    /// A signal's name without `SIG` (`INT`, `TERM`, …), sent to the terminal's process
    /// group.
    Signal(String),
}

/// A JSON control message the daemon sends on a terminal's WebSocket, as a text frame
/// beside the binary output. The first is the hello (`id`, `offset`); the last, before the
/// close, is one of the others. Each shape is told apart by its keys.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ServerControl {
    /// The terminal's id (to reattach with) and the output offset of the first binary
    /// byte that follows.
    Hello { id: String, offset: u64 },
    /// The program ended and all its output was sent.
    Exit { exit: ShellStatus },
    /// Another client attached to the terminal.
    Detached { detached: DetachReason },
    /// A control message was refused, or the box stopped.
    Error { error: crate::ErrorDetail },
}

/// The status of a program that ended, as a shell reports it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellStatus {
    /// The exit code, or 128 + the signal when one ended the program.
    pub code: i32,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachReason {
    pub reason: String,
}

/// Body of `POST /v1/terminals/{id}/signal` and `POST /v1/processes/{id}/signal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SignalRequest {
    /// A signal name without `SIG`: one of [`SIGNALS`].
    pub signal: String,
}

/// The signals a client may send, by name, with their numbers on Linux.
pub const SIGNALS: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("KILL", 9),
    ("USR1", 10),
    ("USR2", 12),
    ("TERM", 15),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("WINCH", 28),
];

/// The number of a signal named in [`SIGNALS`] (with or without `SIG`, any case).
pub fn signal_number(name: &str) -> Option<i32> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
    SIGNALS.iter().find(|(n, _)| *n == bare).map(|(_, n)| *n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Version 3's terminal shapes, frozen.
    #[test]
    fn version_3_terminal_schema_is_frozen() {
        let req = TerminalRequest {
            argv: vec!["bash".into()],
            env: BTreeMap::from([("A".into(), "b".into())]),
            cwd: Some("/tmp".into()),
            user: BoxUser::User,
            size: TerminalSize {
                cols: 100,
                rows: 30,
            },
            term: Some("xterm".into()),
            grace_ms: Some(5000),
            tag: None,
        };
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"argv":["bash"],"env":{"A":"b"},"cwd":"/tmp","user":"user","cols":100,"rows":30,"term":"xterm","grace_ms":5000})
        );
        let info = TerminalInfo {
            id: "tm_0123456789abcdef".into(),
            pid: 9,
            argv: vec!["sh".into()],
            user: BoxUser::Root,
            size: TerminalSize { cols: 80, rows: 24 },
            attached: true,
            output_end: 10,
            output_start: 2,
            exit: Some(TerminalExit {
                code: None,
                signal: Some(2),
            }),
            tag: None,
            cwd: None,
            env: BTreeMap::new(),
        };
        let value = json!({"id":"tm_0123456789abcdef","pid":9,"argv":["sh"],"user":"root","size":{"cols":80,"rows":24},"attached":true,"output_end":10,"output_start":2,"exit":{"code":null,"signal":2}});
        assert_eq!(serde_json::to_value(&info).unwrap(), value);
        assert_eq!(serde_json::from_value::<TerminalInfo>(value).unwrap(), info);
        assert_eq!(
            serde_json::to_value(SignalRequest {
                signal: "INT".into()
            })
            .unwrap(),
            json!({"signal":"INT"})
        );
    }

    /// The WebSocket's control messages, frozen: clients in the field (the CLI, the web
    /// app) match on these exact shapes.
    #[test]
    fn terminal_control_messages_are_frozen() {
        let client = [
            (
                ClientControl::Resize(TerminalSize { cols: 90, rows: 20 }),
                json!({"resize":{"cols":90,"rows":20}}),
            ),
            (ClientControl::Signal("INT".into()), json!({"signal":"INT"})),
        ];
        for (message, value) in client {
            assert_eq!(serde_json::to_value(&message).unwrap(), value);
            assert_eq!(
                serde_json::from_value::<ClientControl>(value).unwrap(),
                message
            );
        }
        let server = [
            (
                ServerControl::Hello {
                    id: "tm_1".into(),
                    offset: 7,
                },
                json!({"id":"tm_1","offset":7}),
            ),
            (
                ServerControl::Exit {
                    exit: ShellStatus { code: 130 },
                },
                json!({"exit":{"code":130}}),
            ),
            (
                ServerControl::Detached {
                    detached: DetachReason {
                        reason: "another client".into(),
                    },
                },
                json!({"detached":{"reason":"another client"}}),
            ),
            (
                ServerControl::Error {
                    error: crate::ErrorDetail {
                        code: crate::ErrorCode::Unavailable,
                        message: "gone".into(),
                    },
                },
                json!({"error":{"code":"unavailable","message":"gone"}}),
            ),
        ];
        for (message, value) in server {
            assert_eq!(serde_json::to_value(&message).unwrap(), value);
            assert_eq!(
                serde_json::from_value::<ServerControl>(value).unwrap(),
                message
            );
        }
    }

    #[test]
    fn a_control_message_of_the_wrong_shape_is_refused() {
        for bad in [
            json!({"resize":"big"}),
            json!({"resize":{"cols":1,"rows":2},"signal":"INT"}),
            json!({"paste":"x"}),
        ] {
            assert!(
                serde_json::from_value::<ClientControl>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_bare_request_gets_the_defaults() {
        let req: TerminalRequest = serde_json::from_value(json!({"future": 1})).unwrap();
        assert_eq!(req.size, TerminalSize { cols: 80, rows: 24 });
        assert!(req.argv.is_empty() && req.grace_ms.is_none());
    }

    #[test]
    fn signals_are_named_without_sig_in_any_case() {
        assert_eq!(signal_number("INT"), Some(2));
        assert_eq!(signal_number("sigterm"), Some(15));
        assert_eq!(signal_number("SEGV"), None);
        assert_eq!(
            TerminalExit {
                code: None,
                signal: Some(2)
            }
            .shell_status(),
            130
        );
    }
}
