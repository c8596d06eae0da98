//! Scheduled wakeups set from inside a box (`berth-wake`), relayed by `berth-init`.
//!
//! The host→guest channel is host-initiated, so a request from the box travels as an event:
//! `berth-wake` asks `berth-init` over [`WAKE_SOCKET`]; `berth-init` journals a
//! [`WAKE_REQUEST_EVENT`] whose data is a [`WakeRequest`]; the host's event pump reads it,
//! applies it with the limits for requests from inside a box, and answers with
//! `POST /v1/wake/reply` ([`WakeReply`]), which `berth-init` hands to the waiting
//! `berth-wake`. Lenient inside: unknown fields are ignored, missing ones defaulted.

use serde::{Deserialize, Serialize};

/// The directory `berth-init` makes at boot on the box's `/run` tmpfs: `berth-wake` (a
/// link to berth-init, or a copy in a VM, which acts by the name it was called by) and the
/// socket. It is on the `PATH` of every process berth starts in the box.
pub const WAKE_BIN_DIR: &str = "/run/berth-bin";
/// The command's name (berth-init called by it acts as the command).
pub const WAKE_COMMAND: &str = "berth-wake";
/// Where `berth-init` listens for `berth-wake`: the box's user and root may connect.
pub const WAKE_SOCKET: &str = "/run/berth-bin/wake.sock";
/// The guest event kind that carries a [`WakeRequest`] to the host.
pub const WAKE_REQUEST_EVENT: &str = "wake_request";
/// The event kind the host writes when a wakeup fires.
pub const WAKEUP_EVENT: &str = "wakeup";
/// Largest request `berth-wake` may send (a message plus a schedule).
pub const MAX_WAKE_REQUEST_BYTES: usize = 64 * 1024;

/// When a wakeup set from the box fires: exactly one of `at`, `in_s`, `cron` (the host
/// checks). The same fields as the public API's `POST /v1/boxes/{ref}/wakeups`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeSchedule {
    /// RFC 3339 time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// Seconds from now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_s: Option<u64>,
    /// A 5-field cron expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// The IANA time zone `cron` is read in (UTC if absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tz: Option<String>,
}

/// What `berth-wake` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum WakeOp {
    Add {
        #[serde(flatten)]
        schedule: WakeSchedule,
        message: String,
    },
    List,
    Remove {
        id: String,
    },
}

/// The data of a [`WAKE_REQUEST_EVENT`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WakeRequest {
    /// Chosen by `berth-init`; the reply names it.
    pub request_id: String,
    #[serde(flatten)]
    pub op: WakeOp,
}

/// The host's answer (`POST /v1/wake/reply`): the HTTP status and JSON body the public
/// API would have answered the same request with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WakeReply {
    pub request_id: String,
    pub status: u16,
    #[serde(default)]
    pub body: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Version 4's shapes: the wake relay and the boot-token handover.
    #[test]
    fn version_4_schema_is_frozen() {
        use serde_json::json;
        let request = WakeRequest {
            request_id: "r1".into(),
            op: WakeOp::Add {
                schedule: WakeSchedule {
                    cron: Some("0 9 * * 1-5".into()),
                    tz: Some("Europe/Paris".into()),
                    ..Default::default()
                },
                message: "standup".into(),
            },
        };
        assert_eq!(
            serde_json::to_value(&request).unwrap(),
            json!({"request_id":"r1","op":"add","cron":"0 9 * * 1-5","tz":"Europe/Paris","message":"standup"})
        );
        let remove = WakeRequest {
            request_id: "r2".into(),
            op: WakeOp::Remove { id: "wk_1".into() },
        };
        assert_eq!(
            serde_json::to_value(&remove).unwrap(),
            json!({"request_id":"r2","op":"remove","id":"wk_1"})
        );
        let reply = WakeReply {
            request_id: "r1".into(),
            status: 201,
            body: json!({"id":"wk_1"}),
        };
        assert_eq!(
            serde_json::to_value(&reply).unwrap(),
            json!({"request_id":"r1","status":201,"body":{"id":"wk_1"}})
        );
        let token = crate::guest::BootTokenRequest {
            token: "t".into(),
            unix_ms: 5,
        };
        assert_eq!(
            serde_json::to_value(&token).unwrap(),
            json!({"token":"t","unix_ms":5})
        );
        assert_eq!(crate::guest::Call::BootToken.introduced_in(), 4);
        assert_eq!(crate::guest::Call::WakeReply.introduced_in(), 4);
    }

    #[test]
    fn a_request_is_flat_json() {
        let req = WakeRequest {
            request_id: "r1".into(),
            op: WakeOp::Add {
                schedule: WakeSchedule {
                    in_s: Some(60),
                    ..Default::default()
                },
                message: "hi".into(),
            },
        };
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"request_id": "r1", "op": "add", "in_s": 60, "message": "hi"})
        );
        assert_eq!(serde_json::from_value::<WakeRequest>(json).unwrap(), req);
        let rm: WakeRequest =
            serde_json::from_str(r#"{"request_id":"r2","op":"remove","id":"wk_1","new":1}"#)
                .unwrap();
        assert_eq!(rm.op, WakeOp::Remove { id: "wk_1".into() });
    }
}
