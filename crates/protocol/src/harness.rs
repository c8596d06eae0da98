//! The harness part of the guest channel (protocol version 2): how the host gives a box's
//! agent program its messages and gets its events back, without losing or repeating any.
//!
//! **Start.** Before a box starts, the host writes a [`HarnessConfig`] to
//! `<run dir>/harness.json`. `berth-init` starts the harness in its `harness` boot phase as
//! the box user in `/home/user`, and again with backoff when it exits (a `harness_exit`
//! event each time; [`HarnessConfig::max_restarts`] exits in a row without a completed turn
//! end in `harness_failed`).
//! Once a harness has run on this volume, every later start gets `resume_args` appended,
//! with `{session}` replaced by the contents of [`crate::guest::SESSION_FILE`].
//!
//! **Messages.** The host sends each message once it is stored, in order, one at a time:
//! `POST /v1/messages` [`DeliverRequest`]. `berth-init` keeps a journal of message ids in
//! [`crate::guest::AGENT_STATE_DIR`] on the volume. A message whose id is in the journal is
//! answered `duplicate: true` and never written again; otherwise it is journalled
//! (`written`, fsync'd), written to the harness's stdin as one stream-json line, and
//! answered once the harness has it: with [`AckMode::Replay`], when the harness echoes it
//! back as a `user` line on stdout (Claude Code's `--replay-user-messages`); with
//! [`AckMode::Write`], when the line is in the pipe. Then the journal says `acked`.
//! A message `written` but never `acked` (the box died in between) is written again when the
//! harness next starts, before anything new. So the harness sees each message once.
//!
//! **Events.** Every harness stdout line is an event (its `type` field is the event's kind;
//! a line that is not a JSON object becomes `log`), every stderr line is `log`, and the
//! harness's life is `harness_start`, `harness_exit`, `harness_failed`. With
//! [`AckMode::Replay`], the `user` event that replays a delivered message carries that
//! message's id as [`REPLAY_MESSAGE_ID`], so a client tells two messages of the same text
//! apart; the `result` that ends a message's turn carries it too (optional within version 2:
//! an older berth-init leaves it out, and the field is berth-init's alone: a harness's own is
//! dropped). `berth-init` numbers
//! them (a per-volume sequence that survives reboots) and journals them on the volume before
//! anyone reads them. `GET /v1/events?after=N` streams every event with `seq > N`, then new
//! ones as they come, until the client disconnects; asking with `after=N` also tells
//! `berth-init` that the host has stored everything up to N, so it may drop those from its
//! journal. The host stores each event with its own per-box sequence number and remembers
//! the guest `seq` it has, in the same transaction.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Written by the host to `<run dir>/harness.json` before a box starts.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HarnessConfig {
    /// Program and arguments, e.g. `["claude", "-p", "--input-format", "stream-json", …]`.
    pub command: Vec<String>,
    /// Appended on every start after the harness has once run on this volume; `{session}`
    /// is replaced by the session id (from the session file, else [`HarnessConfig::session`]).
    #[serde(default)]
    pub resume_args: Vec<String>,
    /// A fixed session id, used when the harness writes none.
    #[serde(default)]
    pub session: Option<String>,
    /// Added to the base environment of the harness.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub ack: AckMode,
    /// Exits in a row (with no `result` event between) before the harness is given up.
    #[serde(default = "default_max_restarts")]
    pub max_restarts: u32,
    /// A turn (a message written to the harness, no `result` since) older than this is
    /// ended by berth-init with a `turn_timeout` event; 0: never. Optional within version
    /// 2: absent means the default and the default is not written, so a default config is
    /// byte for byte the frozen version-2 file and an older berth-init ignores the field.
    #[serde(
        default = "default_turn_timeout_s",
        skip_serializing_if = "is_default_turn_timeout_s"
    )]
    pub turn_timeout_s: u64,
}

fn default_max_restarts() -> u32 {
    5
}

/// Half an hour: longer than any sane agent turn, short enough that a harness which never
/// says `result` does not keep its box awake for good.
pub const DEFAULT_TURN_TIMEOUT_S: u64 = 1800;

fn default_turn_timeout_s() -> u64 {
    DEFAULT_TURN_TIMEOUT_S
}

fn is_default_turn_timeout_s(s: &u64) -> bool {
    *s == DEFAULT_TURN_TIMEOUT_S
}

/// When a delivered message counts as received by the harness.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckMode {
    /// The harness echoes each user message back on stdout (Claude Code:
    /// `--replay-user-messages`; the example echo harness does it too).
    #[default]
    Replay,
    /// The line is written to the harness's stdin.
    Write,
    #[serde(other)]
    Unknown,
}

/// Body of `POST /v1/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliverRequest {
    /// The host's message id (`msg_…`): the deduplication key.
    pub id: String,
    /// The user's text, sent to the harness as
    /// `{"type":"user","message":{"role":"user","content":"…"}}`.
    pub content: String,
}

/// Answer to `POST /v1/messages`: the harness has the message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliverResponse {
    pub id: String,
    /// `true` when the journal already had this id acked: nothing was written.
    #[serde(default)]
    pub duplicate: bool,
}

/// One line of `GET /v1/events`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GuestEvent {
    /// Per-volume, strictly increasing, survives reboots of the box.
    pub seq: u64,
    /// `system`, `assistant`, `user`, `result`, … (the stdout line's `type`), or `log`,
    /// `harness_start`, `harness_exit`, `harness_failed`.
    pub kind: String,
    /// The stdout line's JSON object as it was; for `log`: `{"stream":"stdout"|"stderr",
    /// "line":"…","truncated":bool}`; for the harness's life: see [`HarnessLife`].
    pub data: serde_json::Value,
    /// Milliseconds since the Unix epoch when `berth-init` read it.
    #[serde(default)]
    pub at_ms: u64,
}

/// `data` of the `harness_start`, `harness_exit` and `harness_failed` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HarnessLife {
    #[serde(default)]
    pub pid: Option<u32>,
    /// Whether this start passed the resume arguments.
    #[serde(default)]
    pub resumed: bool,
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    /// Exits in a row so far.
    #[serde(default)]
    pub restarts: u32,
    #[serde(default)]
    pub reason: Option<String>,
}

/// Answer to `GET /v1/harness`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HarnessStatus {
    pub state: HarnessState,
    #[serde(default)]
    pub pid: Option<u32>,
    /// Messages written to the harness and not yet answered by a `result` event: a harness
    /// with a turn in flight is busy, so its box is not idle.
    #[serde(default)]
    pub turns_in_flight: u32,
    /// The newest event `seq`.
    #[serde(default)]
    pub last_seq: u64,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HarnessState {
    /// The box has no harness.
    None,
    Starting,
    Running,
    /// Waiting out the backoff before the next start.
    Restarting,
    /// Gave up after too many exits in a row (`reason` says why).
    Failed,
    #[serde(other)]
    Unknown,
}

/// The field of a `user` event's `data` that names the delivered message it replays, and of
/// a `result` event's the message whose turn it ends (the host's message id, which is a
/// client's idempotency key when it chose one).
pub const REPLAY_MESSAGE_ID: &str = "message_id";

/// The stream-json line for a user message (Claude Code's `--input-format stream-json`).
pub fn user_message_line(content: &str) -> String {
    serde_json::json!({"type": "user", "message": {"role": "user", "content": content}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Version 2's schema, frozen.
    #[test]
    fn version_2_schema_is_frozen() {
        let config: HarnessConfig = serde_json::from_value(json!({"command": ["agent"]})).unwrap();
        assert_eq!(config.ack, AckMode::Replay);
        assert_eq!(config.max_restarts, 5);
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            json!({"command":["agent"],"resume_args":[],"session":null,"env":{},"ack":"replay","max_restarts":5})
        );
        // The optional turn timeout: absent is the default, a set one round-trips.
        assert_eq!(config.turn_timeout_s, DEFAULT_TURN_TIMEOUT_S);
        let short: HarnessConfig =
            serde_json::from_value(json!({"command": ["agent"], "turn_timeout_s": 3})).unwrap();
        assert_eq!(serde_json::to_value(&short).unwrap()["turn_timeout_s"], 3);
        assert_eq!(
            serde_json::to_value(DeliverRequest {
                id: "msg_1".into(),
                content: "hi".into()
            })
            .unwrap(),
            json!({"id":"msg_1","content":"hi"})
        );
        assert_eq!(
            serde_json::to_value(DeliverResponse {
                id: "msg_1".into(),
                duplicate: true
            })
            .unwrap(),
            json!({"id":"msg_1","duplicate":true})
        );
        let event = GuestEvent {
            seq: 3,
            kind: "result".into(),
            data: json!({"type":"result"}),
            at_ms: 9,
        };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({"seq":3,"kind":"result","data":{"type":"result"},"at_ms":9})
        );
        let status = HarnessStatus {
            state: HarnessState::Running,
            pid: Some(4),
            turns_in_flight: 1,
            last_seq: 3,
            reason: None,
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({"state":"running","pid":4,"turns_in_flight":1,"last_seq":3,"reason":null})
        );
    }

    #[test]
    fn user_lines_have_claude_codes_stream_json_shape() {
        let line: serde_json::Value =
            serde_json::from_str(&user_message_line("hi \"you\"")).unwrap();
        assert_eq!(
            line,
            json!({"type":"user","message":{"role":"user","content":"hi \"you\""}})
        );
    }
}
