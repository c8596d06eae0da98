//! `box_send_message` and `box_events`: talking to a box's agent, and reading its log.
//!
//! A message's answer is the `result` event that carries the message's id (docs/api.md,
//! "Messages"). The post answers where the message's turn starts in the log
//! (`events_after`), and the tool follows the event stream from there until that `result`
//! (or a `turn_timeout` for it), as berth's SDKs do; a daemon too old to say follows from
//! the start.
//! The stream is read line by line and each event dropped once looked at, so a long turn
//! costs no memory.

use std::time::Duration;

use http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::answer::{self, Line, Lines};
use crate::api::ApiRequest;
use crate::calls::{box_path, Cx};
use crate::error::ToolError;
use crate::limits::{
    ANSWER_BYTES, EVENTS_BUDGET_BYTES, EVENT_LINE_BYTES, MAX_STREAM_LINE_BYTES,
    SEND_DEFAULT_TIMEOUT_S, SEND_MAX_TIMEOUT_S,
};
use crate::truncate::{cut, with_note};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// The box's name or id (bx_…). Its template must run an agent harness.
    #[serde(rename = "box")]
    pub box_ref: String,
    /// The message to the box's agent.
    pub content: String,
    /// An idempotency key (1-128 of A-Za-z0-9._:-): sending the same id again does not send
    /// the message twice, it waits for the same answer.
    #[serde(default)]
    pub id: Option<String>,
    /// Seconds to wait for the answer (default 120, at most 600). The message stays queued
    /// either way; a late answer can be read with box_events.
    #[serde(default)]
    pub timeout_s: Option<u64>,
}

pub async fn send(cx: Cx<'_>, args: SendArgs) -> Result<String, ToolError> {
    let timeout_s = args.timeout_s.unwrap_or(SEND_DEFAULT_TIMEOUT_S);
    if !(1..=SEND_MAX_TIMEOUT_S).contains(&timeout_s) {
        return Err(ToolError::Argument {
            field: "timeout_s",
            reason: "must be 1 to 600 seconds",
        });
    }
    let mut body = json!({"content": args.content});
    if let Some(id) = &args.id {
        body["id"] = json!(id);
    }
    let posted = ApiRequest::with_json(Method::POST, box_path(&args.box_ref, "/messages"), body);
    let posted: Value = answer::json(cx.call(posted).await?, "a posted message").await?;
    let id = posted["id"].as_str().unwrap_or_default().to_owned();
    let after = posted["events_after"].as_u64().unwrap_or(0);
    let waited = tokio::time::timeout(
        Duration::from_secs(timeout_s),
        turn_end(cx, &args.box_ref, &id, after),
    )
    .await;
    match waited {
        Ok(ended) => Ok(render_answer(&ended?, after)),
        Err(_elapsed) => Ok(format!(
            "no answer within {timeout_s}s; the message (id {id}) is queued and the agent may \
             still be working. Read its answer later with box_events (after={after}), or send \
             again with id=\"{id}\" to wait for the same answer."
        )),
    }
}

async fn page(cx: Cx<'_>, box_ref: &str, after: u64) -> Result<Value, ToolError> {
    let path = box_path(box_ref, &format!("/events?after={after}&wait=false"));
    answer::json(cx.call(ApiRequest::get(path)).await?, "an event page").await
}

/// Follows the event stream after `after` to the event that ends message `id`'s turn.
async fn turn_end(cx: Cx<'_>, box_ref: &str, id: &str, after: u64) -> Result<Value, ToolError> {
    let path = box_path(box_ref, &format!("/events?after={after}"));
    let request = ApiRequest::get(path).accepting("text/event-stream");
    let stream = answer::check(cx.call(request).await?).await?;
    let mut lines = Lines::new(stream.body, MAX_STREAM_LINE_BYTES);
    // One SSE event is `data:` lines up to a blank line; berth sends one `data:` line each.
    let mut data: Option<String> = None;
    while let Some(line) = lines.next().await? {
        match line {
            // Too long to read: not the end of a turn a model can be shown anyway.
            Line::TooLong => data = None,
            Line::Text(line) if line.is_empty() => {
                let Some(text) = data.take() else { continue };
                let Ok(event) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                if ends_turn(&event, id) {
                    return Ok(event);
                }
            }
            Line::Text(line) => {
                if let Some(value) = line.strip_prefix("data:") {
                    data = Some(value.strip_prefix(' ').unwrap_or(value).to_owned());
                }
            }
        }
    }
    Err(ToolError::EventsEnded)
}

fn ends_turn(event: &Value, id: &str) -> bool {
    let kind = event["type"].as_str().unwrap_or_default();
    let message_id = &event["data"][berth_protocol::harness::REPLAY_MESSAGE_ID];
    matches!(kind, "result" | "turn_timeout") && message_id.as_str() == Some(id)
}

/// The turn's answer: the `result`'s text, cut to a model's size.
fn render_answer(event: &Value, after: u64) -> String {
    let seq = event["seq"].as_u64().unwrap_or(0);
    let data = &event["data"];
    if event["type"] == "turn_timeout" {
        return format!(
            "the agent did not finish this turn: berth ended it after {}s (turn_timeout). Its \
             partial work is in box_events (after={after}).",
            data["after_s"]
        );
    }
    let text = data["result"]
        .as_str()
        .unwrap_or("(the result carries no text)");
    let rest = format!(
        "the whole result is event seq {seq}: box_events with after={}",
        seq.saturating_sub(1)
    );
    let answer = with_note(text, ANSWER_BYTES, &rest);
    match data["is_error"] == json!(true) {
        true => format!("(the agent's turn ended in an error)\n{answer}"),
        false => answer,
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsArgs {
    /// The box's name or id (bx_…).
    #[serde(rename = "box")]
    pub box_ref: String,
    /// Show events after this seq (default 0: from the oldest kept). Each result says the
    /// `after` to pass next.
    #[serde(default)]
    pub after: Option<u64>,
}

pub async fn events(cx: Cx<'_>, args: EventsArgs) -> Result<String, ToolError> {
    let after = args.after.unwrap_or(0);
    let page = page(cx, &args.box_ref, after).await?;
    let events = page["events"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let more_stored = page["more"] == json!(true);
    let mut text = String::new();
    if let Some(gap) = page.get("gap").filter(|g| !g.is_null()) {
        text.push_str(&format!(
            "[events {}..={} were pruned before they were read]\n",
            gap["first"], gap["last"]
        ));
    }
    let mut next_after = after;
    let mut shown = 0;
    for event in events {
        let line = event_line(event);
        if shown > 0 && text.len() + line.len() > EVENTS_BUDGET_BYTES {
            break;
        }
        text.push_str(&line);
        text.push('\n');
        next_after = event["seq"].as_u64().unwrap_or(next_after);
        shown += 1;
    }
    if events.is_empty() {
        next_after = page["next_after"].as_u64().unwrap_or(after);
    }
    let more = more_stored || shown < events.len();
    text.push_str(&match (shown, more) {
        (0, _) => format!("no events after {after}; call again with after={next_after} later"),
        (_, true) => format!("[more events: call again with after={next_after}]"),
        (_, false) => format!("[that is all for now; new events come after {next_after}]"),
    });
    Ok(text)
}

/// `seq type data` on one line, the data cut to [`EVENT_LINE_BYTES`].
fn event_line(event: &Value) -> String {
    let data = event["data"].to_string();
    let data = match cut(&data, EVENT_LINE_BYTES) {
        None => data,
        Some(kept) => format!("{kept}… [{} bytes left out]", data.len() - kept.len()),
    };
    format!(
        "{} {} {}",
        event["seq"],
        event["type"].as_str().unwrap_or("?"),
        data
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_ends_at_the_result_for_its_own_message() {
        let result =
            json!({"seq":9,"type":"result","data":{"result":"echo: hi","message_id":"m1"}});
        assert!(ends_turn(&result, "m1"));
        assert!(!ends_turn(&result, "m2"));
        let user = json!({"seq":8,"type":"user","data":{"message_id":"m1"}});
        assert!(!ends_turn(&user, "m1"));
        assert_eq!(render_answer(&result, 7), "echo: hi");
    }

    #[test]
    fn a_long_answer_says_where_the_whole_one_is() {
        let long = "x".repeat(ANSWER_BYTES + 10);
        let result = json!({"seq":9,"type":"result","data":{"result":long,"is_error":true}});
        let text = render_answer(&result, 7);
        assert!(text.starts_with("(the agent's turn ended in an error)\nxxx"));
        assert!(text.ends_with(
            "[… 10 more bytes left out; the whole result is event seq 9: box_events with after=8]"
        ));
    }

    #[test]
    fn event_lines_are_cut() {
        let event = json!({"seq":3,"type":"log","data":{"line":"y".repeat(5000)}});
        let line = event_line(&event);
        assert!(line.starts_with("3 log {\"line\":\"yyy"));
        assert!(line.len() < EVENT_LINE_BYTES + 100 && line.ends_with("bytes left out]"));
    }
}
