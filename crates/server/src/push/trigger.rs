//! When a turn ends (the harness's `result` event is stored) on a box nobody of its tenant
//! is watching, every subscription of the tenant gets a push naming the box and the start
//! of the answer.

use berth_protocol::harness::GuestEvent;
use berth_protocol::BoxId;
use serde_json::Value;

use super::outgoing::Outgoing;
use crate::ctx::Ctx;
use berth_runtime::error_chain;

/// Characters of the answer a notification shows.
pub const BODY_CHARS: usize = 140;

/// The event pump's one call: a batch of events was stored for `id`.
pub fn events_stored(ctx: &Ctx, id: &BoxId, batch: &[GuestEvent]) {
    let mut said: Option<String> = None;
    for event in batch {
        match event.kind.as_str() {
            "assistant" => said = assistant_text(&event.data).or(said),
            "result" => {
                let answer = event.data["result"]
                    .as_str()
                    .map(str::to_owned)
                    .or(said.take())
                    .unwrap_or_default();
                turn_ended(ctx, id, &answer);
            }
            _ => {}
        }
    }
}

fn turn_ended(ctx: &Ctx, id: &BoxId, answer: &str) {
    let record = match ctx.store.get_box(id) {
        Ok(Some(record)) => record,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(box_id = %id, error = %error_chain(&e), "push: cannot read the box");
            return;
        }
    };
    if ctx.push.watchers.is_watched(&record.tenant_id, id) {
        return;
    }
    let subscriptions = match ctx.store.list_push_subscriptions(&record.tenant_id) {
        Ok(subscriptions) => subscriptions,
        Err(e) => {
            tracing::warn!(box_id = %id, error = %error_chain(&e), "push: cannot list subscriptions");
            return;
        }
    };
    if subscriptions.is_empty() {
        return;
    }
    let plaintext = payload(&record.name, answer).to_string().into_bytes();
    for subscription in subscriptions {
        ctx.push
            .sender
            .send(Outgoing::new(subscription, plaintext.clone()));
    }
}

/// What the service worker shows: the box, the answer's start, and where a tap goes.
pub fn payload(box_name: &str, answer: &str) -> Value {
    let body: String = answer.chars().take(BODY_CHARS).collect();
    serde_json::json!({
        "title": box_name,
        "body": body,
        "url": format!("/#/boxes/{box_name}/chat"),
        "box": box_name,
    })
}

/// The text blocks of an `assistant` event (`{"message":{"content":[{"type":"text",…}]}}`).
fn assistant_text(data: &Value) -> Option<String> {
    let blocks = data["message"]["content"].as_array()?;
    let text: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    (!text.is_empty()).then(|| text.join(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_names_the_box_and_cuts_the_answer_at_140_characters() {
        let answer = "é".repeat(200);
        let value = payload("alice", &answer);
        assert_eq!(value["title"], "alice");
        assert_eq!(value["box"], "alice");
        assert_eq!(value["url"], "/#/boxes/alice/chat");
        assert_eq!(value["body"].as_str().unwrap().chars().count(), BODY_CHARS);
        assert_eq!(payload("a", "short")["body"], "short");
    }

    #[test]
    fn the_answer_is_the_assistants_text() {
        let data = serde_json::json!({"type": "assistant", "message": {"content": [
            {"type": "text", "text": "a"}, {"type": "tool_use"}, {"type": "text", "text": "b"}]}});
        assert_eq!(assistant_text(&data).as_deref(), Some("ab"));
        assert_eq!(
            assistant_text(&serde_json::json!({"type": "assistant"})),
            None
        );
    }
}
