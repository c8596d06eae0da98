//! `berth send NAME TEXT`: post a message to a box's agent and print its answer as it
//! streams, until the turn's `result` event.
//!
//! The answer is found on the box's event stream: before posting we read the newest stored
//! seq, then stream from there. Our turn starts at the harness's replay of our message (a
//! `user` event with our text) and ends at the next `result`. Only for a harness that has
//! never been seen replaying user messages (no `user` event in the log pages read, none
//! since) does the first `result` after the post end the turn, its text printed.

use std::io::{IsTerminal as _, Write as _};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use http::Method;
use serde::{Deserialize, Serialize};

use crate::args::box_path;
use crate::client::{Client, ClientError};
use crate::events::{self, message_text, Event, LiveEvents, LogPoint};

/// How long a post is retried while the daemon cannot be reached (it may be restarting).
const POST_RETRY_FOR: Duration = Duration::from_secs(30);
/// How long the box's log is waited for while the daemon or the box's node is away.
const UNAVAILABLE_FOR: Duration = Duration::from_secs(90);
/// Reconnections in a row of the event stream before giving up.
const STREAM_RECONNECTS: u32 = 50;

#[derive(Debug, Args)]
pub struct SendArgs {
    /// The box's name or id (`bx_…`).
    pub name: String,
    /// The message.
    pub text: String,
    /// An idempotency key (1-128 of A-Za-z0-9._:-): sending again with the same key does not
    /// send twice. Without it, a key is made up for this one call, so that retrying after a
    /// lost answer is safe.
    #[arg(long, value_name = "KEY")]
    pub id: Option<String>,
    /// Only post the message (committed once this returns) and print its id; do not wait
    /// for the answer.
    #[arg(long)]
    pub no_wait: bool,
    /// Also print the harness's log lines (its stderr and non-JSON output) on stderr.
    #[arg(long, short)]
    pub verbose: bool,
    /// Print JSON instead of text: with --no-wait the posted message (`{"id","seq"}`),
    /// else each event of the turn as it comes, one a line in the shape of
    /// `berth logs --json`, the last one the turn's `result`.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
struct PostBody<'a> {
    content: &'a str,
    id: &'a str,
}

#[derive(Debug, Deserialize, Serialize)]
pub struct Posted {
    pub id: String,
    pub seq: u64,
}

/// The agent's turn ended badly: exit status 1.
#[derive(Debug, thiserror::Error)]
#[error("the agent's turn failed: {reason}")]
pub struct TurnFailed {
    pub reason: String,
}

pub async fn run(client: &Client, args: SendArgs) -> anyhow::Result<u8> {
    let key = args.id.clone().unwrap_or_else(made_up_key);
    let point = if args.no_wait {
        None
    } else {
        Some(log_point(client, &args.name).await?)
    };
    let posted = post(client, &args.name, &args.text, &key).await?;
    let Some(point) = point else {
        if args.json {
            crate::output::json(&mut std::io::stdout().lock(), &posted)?;
        } else {
            println!("{} (seq {})", posted.id, posted.seq);
        }
        return Ok(0);
    };
    let interrupted = tokio::signal::ctrl_c();
    tokio::select! {
        result = follow(client, &args, point) => result.map(|()| 0),
        _ = interrupted => {
            eprintln!(
                "interrupted; message {} is stored and the agent will still answer it \
                 (see `berth logs {}`)",
                posted.id, args.name
            );
            Ok(130)
        }
    }
}

/// Where the box's log ends before the post, retried while the daemon or the box's node is
/// away (a node being replaced takes its lease and a grace period: `docs/durable.md`).
async fn log_point(client: &Client, name: &str) -> anyhow::Result<events::LogPoint> {
    let deadline = Instant::now() + UNAVAILABLE_FOR;
    loop {
        match events::log_point(client, name).await {
            Ok(point) => return Ok(point),
            Err(e) if (e.is_transport() || e.is_unavailable()) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {name}'s event log")),
        }
    }
}

/// Posts the message, retrying with the same key while the daemon is unreachable.
pub async fn post(client: &Client, name: &str, text: &str, key: &str) -> anyhow::Result<Posted> {
    let path = box_path(name, "/messages");
    let body = PostBody {
        content: text,
        id: key,
    };
    let deadline = Instant::now() + POST_RETRY_FOR;
    loop {
        match client
            .json::<Posted>(Method::POST, &path, Some(&body), "a posted message")
            .await
        {
            Ok(posted) => return Ok(posted),
            Err(e) if e.is_transport() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => {
                let context = post_context(&e, name);
                return Err(e).context(context);
            }
        }
    }
}

fn post_context(err: &ClientError, name: &str) -> String {
    if err.is_transport() {
        format!("posting the message to {name} (it may or may not be stored; sending again with the same --id is safe)")
    } else {
        format!("posting the message to {name}")
    }
}

async fn follow(client: &Client, args: &SendArgs, point: LogPoint) -> anyhow::Result<()> {
    let mut live = LiveEvents::new(client, &args.name, point.last_seq, STREAM_RECONNECTS);
    let mut turn = Turn::new(&args.text, point.replays);
    let dim = std::io::stderr().is_terminal();
    let mut out = std::io::stdout().lock();
    loop {
        let event = live
            .next()
            .await
            .with_context(|| format!("following {}'s events", args.name))?;
        let steps = turn.on(&event);
        if args.json && turn.ours() {
            crate::output::json_line(&mut out, &event)?;
        }
        for step in steps {
            match step {
                Step::Text(_) if args.json => {}
                Step::Text(text) => {
                    out.write_all(text.as_bytes())?;
                    if !text.ends_with('\n') {
                        out.write_all(b"\n")?;
                    }
                    out.flush().context("writing to stdout")?;
                }
                Step::Log(line) if args.verbose => {
                    if dim {
                        eprintln!("\x1b[2m{line}\x1b[0m");
                    } else {
                        eprintln!("{line}");
                    }
                }
                Step::Log(_) => {}
                Step::Done(None) => return Ok(()),
                Step::Done(Some(reason)) => return Err(TurnFailed { reason }.into()),
            }
        }
    }
}

/// What following one turn does with an event.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Assistant text to print.
    Text(String),
    /// A harness log line (shown with `--verbose`).
    Log(String),
    /// The turn ended; `Some(reason)` when it failed.
    Done(Option<String>),
}

/// Tracks our turn on the event stream.
#[derive(Debug)]
pub struct Turn {
    content: String,
    /// Our `user` replay has been seen: the events now belong to our turn.
    started: bool,
    /// The harness is known to replay user messages (seen in the log before we posted, or
    /// since): only our replay starts our turn.
    saw_user: bool,
    printed: bool,
}

impl Turn {
    /// `replays`: the box's log already shows the harness replaying user messages.
    pub fn new(content: &str, replays: bool) -> Turn {
        Turn {
            content: content.to_string(),
            started: false,
            saw_user: replays,
            printed: false,
        }
    }

    /// Whether this event is part of our turn: after our replay, or (for a harness that
    /// does not replay) any event since the post.
    fn ours(&self) -> bool {
        self.started || !self.saw_user
    }

    pub fn on(&mut self, event: &Event) -> Vec<Step> {
        let data = &event.data;
        match event.kind.as_str() {
            "user" => {
                // Tool results are `user` events too; only a text equal to ours starts the turn.
                if !self.started && message_text(event) == self.content {
                    self.started = true;
                }
                if data
                    .get("message")
                    .and_then(|m| m.get("content"))
                    .is_some_and(|c| c.is_string())
                {
                    self.saw_user = true;
                }
                Vec::new()
            }
            "assistant" if self.started => {
                let text = message_text(event);
                if text.is_empty() {
                    return Vec::new();
                }
                self.printed = true;
                vec![Step::Text(text)]
            }
            "result" if self.ours() => {
                let mut steps = Vec::new();
                let result = data.get("result").and_then(|r| r.as_str());
                if let (false, Some(text)) = (self.printed, result) {
                    if !text.is_empty() {
                        steps.push(Step::Text(text.to_string()));
                    }
                }
                let failed = data.get("is_error").and_then(|v| v.as_bool()) == Some(true);
                let reason = failed.then(|| {
                    result
                        .filter(|r| !r.is_empty())
                        .or_else(|| data.get("subtype").and_then(|s| s.as_str()))
                        .unwrap_or("the result says is_error")
                        .to_string()
                });
                steps.push(Step::Done(reason));
                steps
            }
            // A harness that exits mid-turn never answers this message (it had it: the
            // replay was the acknowledgement). Before our replay, the message is written
            // again to the restarted harness, so we keep waiting.
            "harness_exit" if self.started => {
                let how = match (data.get("code"), data.get("signal")) {
                    (Some(code), _) if !code.is_null() => format!("with status {code}"),
                    (_, Some(signal)) if !signal.is_null() => format!("on signal {signal}"),
                    _ => "unexpectedly".to_string(),
                };
                vec![Step::Done(Some(format!(
                    "the harness exited {how} before answering"
                )))]
            }
            "harness_failed" => {
                let reason = data
                    .get("reason")
                    .and_then(|r| r.as_str())
                    .unwrap_or("it kept exiting");
                vec![Step::Done(Some(format!("the harness failed: {reason}")))]
            }
            "state" if data.get("state").and_then(|s| s.as_str()) == Some("failed") => {
                let reason = data
                    .get("reason")
                    .and_then(|r| r.as_str())
                    .unwrap_or("no reason given");
                vec![Step::Done(Some(format!("the box failed: {reason}")))]
            }
            "log" => {
                let stream = data.get("stream").and_then(|s| s.as_str()).unwrap_or("?");
                let line = data.get("line").and_then(|s| s.as_str()).unwrap_or("");
                vec![Step::Log(format!("[{stream}] {line}"))]
            }
            _ => Vec::new(),
        }
    }
}

/// A key for a post without `--id`: unique enough for one client's retries.
fn made_up_key() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("cli-{}-{nanos}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(kind: &str, data: serde_json::Value) -> Event {
        Event {
            seq: 0,
            kind: kind.into(),
            data,
            created_at: String::new(),
        }
    }

    fn user(text: &str) -> Event {
        ev(
            "user",
            json!({"type":"user","message":{"role":"user","content":text}}),
        )
    }

    fn assistant(text: &str) -> Event {
        ev(
            "assistant",
            json!({"type":"assistant","message":{"content":[{"type":"text","text":text}]}}),
        )
    }

    #[test]
    fn our_turn_starts_at_our_replay_and_ends_at_its_result() {
        let mut turn = Turn::new("hi", false);
        // A previous turn still finishing: not ours.
        assert!(turn.on(&user("earlier")).is_empty());
        assert!(turn.on(&assistant("old answer")).is_empty());
        assert!(turn
            .on(&ev(
                "result",
                json!({"is_error":false,"result":"old answer"})
            ))
            .is_empty());
        assert!(turn.on(&user("hi")).is_empty());
        assert_eq!(
            turn.on(&assistant("hello")),
            vec![Step::Text("hello".into())]
        );
        assert_eq!(
            turn.on(&ev("result", json!({"is_error":false,"result":"hello"}))),
            vec![Step::Done(None)]
        );
    }

    #[test]
    fn a_result_only_answer_is_printed_and_errors_fail_the_turn() {
        let mut turn = Turn::new("x", false);
        turn.on(&user("x"));
        assert_eq!(
            turn.on(&ev(
                "result",
                json!({"is_error":true,"result":"rate limited"})
            )),
            vec![
                Step::Text("rate limited".into()),
                Step::Done(Some("rate limited".into()))
            ]
        );
    }

    #[test]
    fn harness_and_box_failures_end_the_turn() {
        let mut turn = Turn::new("x", false);
        assert_eq!(
            turn.on(&ev("harness_failed", json!({"reason":"exited 5 times"}))),
            vec![Step::Done(Some(
                "the harness failed: exited 5 times".into()
            ))]
        );
        assert_eq!(
            turn.on(&ev("state", json!({"state":"failed","reason":"oom"}))),
            vec![Step::Done(Some("the box failed: oom".into()))]
        );
        assert!(turn
            .on(&ev("state", json!({"state":"running","reason":null})))
            .is_empty());
    }

    #[test]
    fn a_harness_exit_ends_the_turn_only_once_it_had_the_message() {
        let mut turn = Turn::new("crash", false);
        let exit = ev("harness_exit", json!({"pid":5,"code":3,"signal":null}));
        assert!(turn.on(&exit).is_empty());
        turn.on(&user("crash"));
        assert_eq!(
            turn.on(&exit),
            vec![Step::Done(Some(
                "the harness exited with status 3 before answering".into()
            ))]
        );
    }

    #[test]
    fn a_harness_without_replay_is_followed_from_the_post() {
        let mut turn = Turn::new("x", false);
        // No user replay: the assistant text is not shown, but the result is.
        assert_eq!(
            turn.on(&ev("result", json!({"result":"done"}))),
            vec![Step::Text("done".into()), Step::Done(None)]
        );
    }

    #[test]
    fn an_earlier_turn_s_result_is_not_ours_once_the_harness_is_known_to_replay() {
        // Posted while "slow" was still being answered; the log showed replays before.
        let mut turn = Turn::new("next", true);
        assert!(turn.on(&assistant("echo: slow")).is_empty());
        assert!(turn
            .on(&ev(
                "result",
                json!({"is_error":false,"result":"echo: slow"})
            ))
            .is_empty());
        turn.on(&user("next"));
        assert_eq!(
            turn.on(&assistant("echo: next")),
            vec![Step::Text("echo: next".into())]
        );
    }

    #[test]
    fn tool_results_do_not_count_as_replays() {
        let mut turn = Turn::new("x", false);
        let tool = ev(
            "user",
            json!({"message":{"content":[{"type":"tool_result","content":"x"}]}}),
        );
        assert!(turn.on(&tool).is_empty());
        assert!(!turn.started && !turn.saw_user);
    }

    #[test]
    fn logs_are_steps_for_verbose() {
        let mut turn = Turn::new("x", false);
        assert_eq!(
            turn.on(&ev("log", json!({"stream":"stderr","line":"warming up"}))),
            vec![Step::Log("[stderr] warming up".into())]
        );
    }

    #[test]
    fn made_up_keys_are_valid_idempotency_keys() {
        let key = made_up_key();
        assert!(key.len() <= 128);
        assert!(key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b)));
    }
}
