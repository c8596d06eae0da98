//! `POST /v1/messages`: one message to the harness, exactly once per id. Deliveries are
//! serialized. An acked id is a duplicate; a written-but-unacked id is waited for (never
//! written twice); a new id is journalled, written, and waited for. The wait ends with the
//! acknowledgement, or `timeout` at the deadline, or `unavailable` when the harness fails.

use berth_protocol::harness::{
    user_message_line, DeliverRequest, DeliverResponse, HarnessState, REPLAY_MESSAGE_ID,
};
use serde_json::Value;
use tokio::time::Instant;

use super::message_log::Pending;
use super::{lock, Harness, StdinLine};
use crate::error::ApiError;

/// What one look at the state decided.
enum Step {
    Done(DeliverResponse),
    Wait,
}

pub async fn deliver(h: &Harness, req: DeliverRequest) -> Result<DeliverResponse, ApiError> {
    let deadline = Instant::now() + h.deliver_timeout;
    let timeout = || ApiError::DeliverTimeout {
        id: req.id.clone(),
        after_ms: u64::try_from(h.deliver_timeout.as_millis()).unwrap_or(u64::MAX),
    };
    let _serial = tokio::time::timeout_at(deadline, h.deliver_lock.lock())
        .await
        .map_err(|_| timeout())?;
    let mut changed = h.changed.subscribe();
    let mut first = true;
    loop {
        changed.borrow_and_update();
        let looked = step(h, &req, first);
        first = false;
        match looked? {
            Step::Done(response) => return Ok(response),
            Step::Wait => {}
        }
        match tokio::time::timeout_at(deadline, changed.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) | Err(_) => return Err(timeout()),
        }
    }
}

/// `first`: whether this is the call's first look (an id acked by then is a duplicate).
fn step(h: &Harness, req: &DeliverRequest, first: bool) -> Result<Step, ApiError> {
    let Some(journals) = &h.journals else {
        return Err(unavailable("this box has no harness".to_owned()));
    };
    let mut live = lock(&h.live);
    let mut messages = lock(&journals.messages);
    if messages.is_acked(&req.id) {
        return Ok(Step::Done(DeliverResponse {
            id: req.id.clone(),
            duplicate: first,
        }));
    }
    match live.state {
        HarnessState::None => return Err(unavailable("this box has no harness".to_owned())),
        HarnessState::Failed | HarnessState::Unknown => {
            let reason = live.reason.clone().unwrap_or_else(|| "failed".to_owned());
            return Err(unavailable(reason));
        }
        HarnessState::Starting | HarnessState::Restarting => return Ok(Step::Wait),
        HarnessState::Running => {}
    }
    if messages.is_unacked(&req.id) {
        return Ok(Step::Wait);
    }
    if live.stopping {
        return Err(unavailable("the box is stopping".to_owned()));
    }
    let after_seq = *h.last_seq.borrow();
    messages
        .write(&req.id, &req.content, after_seq)
        .map_err(|source| ApiError::Journal {
            op: "journal the message",
            source,
        })?;
    if let Some(stdin) = &live.stdin {
        // A closed channel means the harness just died: its restart re-writes the message.
        let _ = stdin.send(StdinLine {
            id: req.id.clone(),
            line: user_message_line(&req.content),
        });
        live.turns.push(&req.id);
    }
    Ok(Step::Wait)
}

fn unavailable(reason: String) -> ApiError {
    ApiError::HarnessUnavailable { reason }
}

/// The text of a replayed user line: `message.content` as a string, or its text blocks
/// joined. Tool results and other block kinds give `None`.
pub fn replayed_content(data: &Value) -> Option<String> {
    match data.get("message")?.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => {
            let mut text = String::new();
            for block in blocks {
                if block.get("type")?.as_str()? != "text" {
                    return None;
                }
                text.push_str(block.get("text")?.as_str()?);
            }
            Some(text)
        }
        _ => None,
    }
}

/// Matches the replayed user lines of `batch` to the messages they replay and names each
/// message on its line ([`REPLAY_MESSAGE_ID`]): in turn, a line replays the oldest of
/// `unacked` not matched yet when its text is that message's. Returns the matched ids,
/// oldest first: the messages these lines acknowledge.
pub fn tag_replays<'a>(
    batch: &mut [(String, Value)],
    mut unacked: impl Iterator<Item = &'a Pending>,
) -> Vec<String> {
    let mut ids = Vec::new();
    let mut next = unacked.next();
    for (kind, data) in batch.iter_mut() {
        let Some(pending) = next else { break };
        if kind != "user" || replayed_content(data).as_deref() != Some(pending.content.as_str()) {
            continue;
        }
        if let Value::Object(line) = data {
            line.insert(REPLAY_MESSAGE_ID.to_owned(), pending.id.clone().into());
        }
        ids.push(pending.id.clone());
        next = unacked.next();
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pending(id: &str, content: &str) -> Pending {
        Pending {
            id: id.into(),
            content: content.into(),
            after_seq: 0,
        }
    }

    fn user(text: &str) -> (String, Value) {
        let line = json!({"type":"user","message":{"role":"user","content":text}});
        ("user".into(), line)
    }

    #[test]
    fn replays_of_the_same_text_are_named_by_their_own_messages() {
        let unacked = [
            pending("a", "hi"),
            pending("b", "hi"),
            pending("c", "other"),
        ];
        let mut batch = vec![
            user("hi"),
            ("assistant".into(), json!({"type":"assistant"})),
            user("hi"),
            // Not the next message's text: not a replay of it.
            user("unrelated"),
            (
                "user".into(),
                json!({"type":"user","message":{"content":[{"type":"tool_result","content":"x"}]}}),
            ),
        ];
        assert_eq!(tag_replays(&mut batch, unacked.iter()), ["a", "b"]);
        let named: Vec<Option<&str>> = batch
            .iter()
            .map(|(_, d)| d.get(REPLAY_MESSAGE_ID).and_then(Value::as_str))
            .collect();
        assert_eq!(named, [Some("a"), None, Some("b"), None, None]);
        // Nothing waiting: nothing named.
        let mut late = vec![user("hi")];
        assert!(tag_replays(&mut late, [].iter()).is_empty());
        assert!(late[0].1.get(REPLAY_MESSAGE_ID).is_none());
    }

    #[test]
    fn replayed_user_lines_are_matched_by_their_text() {
        let plain = json!({"type":"user","message":{"role":"user","content":"hi"}});
        assert_eq!(replayed_content(&plain).as_deref(), Some("hi"));
        let blocks = json!({"type":"user","message":{"content":[{"type":"text","text":"h"},{"type":"text","text":"i"}]}});
        assert_eq!(replayed_content(&blocks).as_deref(), Some("hi"));
        let tool =
            json!({"type":"user","message":{"content":[{"type":"tool_result","content":"hi"}]}});
        assert_eq!(replayed_content(&tool), None);
        assert_eq!(replayed_content(&json!({"type":"user"})), None);
    }
}
