//! What a receiver is told: the event names a webhook can want, and the body of one
//! delivery, built from a queued box event. A body is bounded: an answer's text is cut at
//! [`ANSWER_CHARS`] (the whole turn is in the box's event log).

use berth_store::webhooks::QueuedEvent;
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Characters of a turn's answer a `turn.completed` carries.
pub const ANSWER_CHARS: usize = 4096;

/// The event names, as receivers see them.
pub const EVENT_NAMES: &[&str] = &[
    BOX_STATE_CHANGED,
    BOX_FAILED,
    TURN_COMPLETED,
    WAKEUP_FIRED,
    PROCESS_EXITED,
];

pub const BOX_STATE_CHANGED: &str = "box.state_changed";
pub const BOX_FAILED: &str = "box.failed";
pub const TURN_COMPLETED: &str = "turn.completed";
pub const WAKEUP_FIRED: &str = "wakeup.fired";
pub const PROCESS_EXITED: &str = "process.exited";
/// Sent only by `POST /v1/webhooks/{id}/test`.
pub const WEBHOOK_TEST: &str = "webhook.test";

/// The webhook events one box event makes: `(name, data)`; none for a kind no webhook
/// is told of. A state change that records a failure is both a change and a failure (a harness that gave up fails its box: that change).
pub fn from_box_event(event: &QueuedEvent) -> Vec<(&'static str, Value)> {
    let d = &event.data;
    let data = |extra: Value| {
        let mut data = json!({
            "box": {"id": event.box_id, "name": event.box_name},
            "seq": event.seq,
        });
        if let (Some(data), Value::Object(extra)) = (data.as_object_mut(), extra) {
            data.extend(extra);
        }
        data
    };
    match event.kind.as_str() {
        "state" => {
            let change =
                json!({"state": d["state"], "reason": d["reason"], "failure": d["failure"]});
            let failed = d["state"] == "failed" || !d["failure"].is_null();
            let mut out = vec![(BOX_STATE_CHANGED, data(change.clone()))];
            if failed {
                out.push((BOX_FAILED, data(change)));
            }
            out
        }
        "result" => {
            let answer = d["result"].as_str().unwrap_or_default();
            let cut: String = answer.chars().take(ANSWER_CHARS).collect();
            vec![(
                TURN_COMPLETED,
                data(json!({
                    "answer": cut,
                    "answer_truncated": cut.len() < answer.len(),
                    "is_error": d["is_error"].as_bool().unwrap_or(false),
                    "timed_out": false,
                })),
            )]
        }
        "turn_timeout" => vec![(
            TURN_COMPLETED,
            data(json!({
                "answer": "",
                "answer_truncated": false,
                "is_error": true,
                "timed_out": true,
                "message_id": d["message_id"],
            })),
        )],
        "wakeup" => vec![(WAKEUP_FIRED, data(json!({"wakeup": d})))],
        "process_exit" => vec![(
            PROCESS_EXITED,
            data(json!({
                "process_id": d["id"],
                "argv": d["argv"],
                "code": d["code"],
                "signal": d["signal"],
                "timed_out": d["timed_out"],
                "status": d["status"],
            })),
        )],
        _ => Vec::new(),
    }
}

/// The body of a delivery, as the Standard Webhooks specification shapes it.
pub fn body(name: &str, at: OffsetDateTime, data: Value) -> String {
    json!({
        "type": name,
        "timestamp": at.format(&Rfc3339).unwrap_or_default(),
        "data": data,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(kind: &str, data: Value) -> QueuedEvent {
        QueuedEvent {
            id: 1,
            tenant_id: "tn_aaaaaaaaaaaaaaaaaaaa".parse().unwrap(),
            box_id: "bx_a".to_owned(),
            box_name: "alice".to_owned(),
            seq: 7,
            kind: kind.to_owned(),
            data,
            created_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn box_events_become_webhook_events() {
        let running = from_box_event(&queued(
            "state",
            json!({"state": "running", "reason": null}),
        ));
        assert_eq!(running.len(), 1);
        assert_eq!(running[0].0, BOX_STATE_CHANGED);
        assert_eq!(running[0].1["box"]["name"], "alice");
        assert_eq!(running[0].1["seq"], 7);
        assert_eq!(running[0].1["state"], "running");

        let failed = from_box_event(&queued(
            "state",
            json!({"state": "failed", "reason": "runc", "failure": {"transition": "start"}}),
        ));
        let names: Vec<_> = failed.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, [BOX_STATE_CHANGED, BOX_FAILED]);
        assert_eq!(failed[1].1["failure"]["transition"], "start");

        let long = "é".repeat(ANSWER_CHARS + 10);
        let turn = from_box_event(&queued("result", json!({"result": long})));
        assert_eq!(turn[0].0, TURN_COMPLETED);
        assert_eq!(
            turn[0].1["answer"].as_str().unwrap().chars().count(),
            ANSWER_CHARS
        );
        assert_eq!(turn[0].1["answer_truncated"], true);

        let exit = from_box_event(&queued("process_exit", json!({"id": "pr_1", "code": 3})));
        assert_eq!(
            (exit[0].0, &exit[0].1["process_id"], &exit[0].1["code"]),
            (PROCESS_EXITED, &json!("pr_1"), &json!(3))
        );
        assert!(from_box_event(&queued("assistant", json!({}))).is_empty());

        let body: Value = serde_json::from_str(&body(
            TURN_COMPLETED,
            OffsetDateTime::UNIX_EPOCH,
            json!({"a": 1}),
        ))
        .unwrap();
        assert_eq!(
            body,
            json!({"type": TURN_COMPLETED, "timestamp": "1970-01-01T00:00:00Z", "data": {"a": 1}})
        );
    }
}
