//! Runs the harness: starts it as the box user (through the executor and its one reaper),
//! re-writes the messages it never acknowledged, turns its output into events, restarts it
//! with backoff when it exits, and gives up after `max_restarts` exits in a row without a
//! completed turn.

use std::sync::Arc;
use std::time::Duration;

use berth_protocol::harness::{
    AckMode, HarnessConfig, HarnessLife, HarnessState, REPLAY_MESSAGE_ID,
};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::mpsc;

use super::deliver::tag_replays;
use super::lines::{Line, Splitter};
use super::{lock, resume, Harness, StdinLine};
use crate::exec::Executor;
use crate::reaper::{kill_group, Exit};

/// In the state dir once a harness has started on this volume: later starts resume.
pub const RAN_MARKER: &str = "harness-ran";
const BACKOFF_FIRST: Duration = Duration::from_millis(100);
const BACKOFF_CAP: Duration = Duration::from_secs(10);
/// How long output is still read after the harness exited.
const DRAIN_GRACE: Duration = Duration::from_millis(500);
const READ_CHUNK: usize = 64 * 1024;
/// Kinds only berth-init may emit: a harness line claiming one becomes a `log` event.
const RESERVED: [&str; 6] = [
    "log",
    "harness_start",
    "harness_exit",
    "harness_failed",
    TURN_TIMEOUT,
    berth_protocol::service::SERVICE_FAILED_EVENT,
];
/// The event that ends a turn the harness never answered with a `result`.
pub const TURN_TIMEOUT: &str = "turn_timeout";
/// How often overdue turns are looked for (the timeout is whole seconds).
const TURN_CHECK: Duration = Duration::from_millis(500);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Starts supervising when the box has a (valid) harness, once `services_settled` has
/// resolved (the template's services come first); returns at once.
pub fn start(
    h: &Arc<Harness>,
    exec: &Arc<Executor>,
    services_settled: impl std::future::Future<Output = ()> + Send + 'static,
) {
    if let Some(config) = h.config.clone() {
        if config.turn_timeout_s > 0 {
            let limit = Duration::from_secs(config.turn_timeout_s);
            tokio::spawn(watch_turns(h.clone(), limit));
        }
        let (h, exec) = (h.clone(), exec.clone());
        tokio::spawn(async move {
            services_settled.await;
            supervise(h, exec, config).await
        });
    }
}

async fn supervise(h: Arc<Harness>, exec: Arc<Executor>, config: HarnessConfig) {
    let Some(state_dir) = h.journals.as_ref().map(|j| j.state_dir.clone()) else {
        return;
    };
    let marker = state_dir.join(RAN_MARKER);
    loop {
        if lock(&h.live).stopping {
            return;
        }
        set_state(&h, HarnessState::Starting, None);
        let has_run = marker.exists();
        let session_path = h.home.join(".berth").join("session");
        let session = tokio::task::spawn_blocking(move || resume::read_session(&session_path))
            .await
            .ok()
            .flatten();
        let args = resume::start_args(&config, has_run, session);
        if let Some(note) = &args.note {
            emit(
                &h,
                vec![log_event("stderr", &format!("berth-init: {note}"))],
            );
        }
        let (pid, exit, reason) = match exec.spawn_piped(args.argv, &config.env) {
            Err(reason) => (
                None,
                Exit {
                    code: None,
                    signal: None,
                },
                Some(reason),
            ),
            Ok(run) => {
                if !has_run {
                    if let Err(err) = std::fs::write(&marker, b"") {
                        eprintln!("berth-init: cannot write {}: {err}", marker.display());
                    }
                }
                let pid = run.pid;
                let exit = run_once(&h, &exec, &config, run, args.resumed).await;
                (Some(pid as u32), exit, None)
            }
        };
        let (restarts, stopping) = {
            let mut live = lock(&h.live);
            live.stdin = None;
            live.pid = None;
            live.turns.clear();
            live.exits_in_a_row += 1;
            (live.exits_in_a_row, live.stopping)
        };
        let life = HarnessLife {
            pid,
            resumed: args.resumed,
            code: exit.code,
            signal: exit.signal,
            restarts,
            reason: reason.clone(),
        };
        emit(&h, vec![life_event("harness_exit", &life)]);
        if stopping {
            return;
        }
        if restarts >= config.max_restarts {
            let why = format!(
                "the harness exited {restarts} times in a row without completing a turn (last: {})",
                reason.unwrap_or_else(|| describe(exit))
            );
            set_state(&h, HarnessState::Failed, Some(why.clone()));
            let life = HarnessLife {
                reason: Some(why),
                ..life
            };
            emit(&h, vec![life_event("harness_failed", &life)]);
            return;
        }
        set_state(&h, HarnessState::Restarting, None);
        let backoff = BACKOFF_FIRST
            .saturating_mul(1 << (restarts - 1).min(16))
            .min(BACKOFF_CAP);
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = h.stop.notified() => {}
        }
    }
}

/// One life of the harness: announce it, feed it, read it, wait for its exit.
async fn run_once(
    h: &Arc<Harness>,
    exec: &Executor,
    config: &HarnessConfig,
    run: crate::exec::Running,
    resumed: bool,
) -> Exit {
    let pid = run.pid;
    let restarts = lock(&h.live).exits_in_a_row;
    let life = HarnessLife {
        pid: Some(pid as u32),
        resumed,
        code: None,
        signal: None,
        restarts,
        reason: None,
    };
    emit(h, vec![life_event("harness_start", &life)]);
    let stdout = tokio::spawn(read_output(run.stdout, h.clone(), Stream::Stdout));
    let stderr = tokio::spawn(read_output(run.stderr, h.clone(), Stream::Stderr));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(write_stdin(rx, run.stdin, h.clone(), config.ack));
    {
        // Messages written before and never acknowledged go first, in order.
        let mut live = lock(&h.live);
        if let Some(j) = &h.journals {
            for pending in lock(&j.messages).unacked() {
                let line = berth_protocol::harness::user_message_line(&pending.content);
                let _ = tx.send(StdinLine {
                    id: pending.id.clone(),
                    line,
                });
                live.turns.push(&pending.id);
            }
        }
        live.stdin = Some(tx);
        live.state = HarnessState::Running;
        live.pid = Some(pid as u32);
        live.reason = None;
    }
    h.notify_changed();
    let exit = run.exit.await.unwrap_or(Exit {
        code: None,
        signal: None,
    });
    // Stragglers of its process group would keep the pipes open.
    kill_group(pid);
    for reader in [stdout, stderr] {
        let abort = reader.abort_handle();
        if tokio::time::timeout(DRAIN_GRACE, reader).await.is_err() {
            abort.abort();
        }
    }
    exec.reaper.forget_group_if_empty(pid);
    exit
}

fn set_state(h: &Harness, state: HarnessState, reason: Option<String>) {
    {
        let mut live = lock(&h.live);
        live.state = state;
        if reason.is_some() {
            live.reason = reason;
        }
    }
    h.notify_changed();
}

fn describe(exit: Exit) -> String {
    match (exit.code, exit.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "unknown exit".to_owned(),
    }
}

async fn write_stdin(
    mut rx: mpsc::UnboundedReceiver<StdinLine>,
    stdin: Option<pipe::Sender>,
    h: Arc<Harness>,
    ack: AckMode,
) {
    let Some(mut pipe) = stdin else { return };
    while let Some(item) = rx.recv().await {
        let mut bytes = item.line.into_bytes();
        bytes.push(b'\n');
        if pipe.write_all(&bytes).await.is_err() {
            return; // the harness is gone; its restart re-writes what is unacked
        }
        if ack == AckMode::Write {
            acknowledge(&h, &item.id);
        }
    }
}

async fn read_output(pipe: Option<pipe::Receiver>, h: Arc<Harness>, stream: Stream) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = vec![0u8; READ_CHUNK];
    let mut splitter = Splitter::default();
    let mut lines = Vec::new();
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        splitter.push(&buf[..n], &mut lines);
        if !lines.is_empty() {
            on_lines(&h, stream, std::mem::take(&mut lines));
        }
    }
    splitter.finish(&mut lines);
    on_lines(&h, stream, lines);
}

/// Journals a batch of lines as events, then acts on them: a replayed user message
/// acknowledges the oldest unacknowledged one; a `result` ends the oldest turn, names that
/// turn's message on its event and (with `ack = "replay"`) acknowledges it, so a harness
/// that never echoes still gets its messages counted as received once it has answered them.
/// A result acknowledges its own turn's message only: a message written after the harness
/// answered but before its answer was read here is not the answered one.
fn on_lines(h: &Harness, stream: Stream, lines: Vec<Line>) {
    let mut batch: Vec<(String, Value)> = lines
        .into_iter()
        .filter_map(|line| to_event(stream, line))
        .collect();
    let replay = h.config.as_ref().is_some_and(|c| c.ack == AckMode::Replay);
    // Each replay and each result names its message on its event, before anyone can read it.
    let replayed = match &h.journals {
        Some(j) if replay => tag_replays(&mut batch, lock(&j.messages).unacked()),
        _ => Vec::new(),
    };
    let results = batch.iter().filter(|(kind, _)| kind == "result").count();
    let answered = if results > 0 {
        let mut live = lock(&h.live);
        live.exits_in_a_row = 0;
        live.turns.end(results)
    } else {
        Vec::new()
    };
    let results_in_batch = batch.iter_mut().filter(|(kind, _)| kind == "result");
    for ((_, data), id) in results_in_batch.zip(&answered) {
        if let Value::Object(line) = data {
            line.insert(REPLAY_MESSAGE_ID.to_owned(), id.clone().into());
        }
    }
    emit(h, batch);
    if replay {
        for id in replayed.iter().chain(&answered) {
            acknowledge(h, id);
        }
    }
    if results > 0 {
        h.notify_changed();
    }
}

/// Ends turns that ran past `limit` without a `result`, until the box stops.
async fn watch_turns(h: Arc<Harness>, limit: Duration) {
    let mut tick = tokio::time::interval(TURN_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if lock(&h.live).stopping {
            return;
        }
        end_overdue_turn(&h, limit);
    }
}

/// The current turn, when older than `limit`, is over: a `turn_timeout` event says so
/// (journalled first, so a crash before the acknowledgement is repaired at boot) and its
/// message counts as received, never written to the harness again.
fn end_overdue_turn(h: &Harness, limit: Duration) {
    let (id, ran) = {
        let mut live = lock(&h.live);
        let Some((id, ran)) = live.turns.current() else {
            return;
        };
        if ran < limit {
            return;
        }
        let id = id.to_owned();
        live.turns.end(1);
        (id, ran)
    };
    emit(
        h,
        vec![(
            TURN_TIMEOUT.to_owned(),
            json!({"message_id": id, "after_s": ran.as_secs()}),
        )],
    );
    acknowledge(h, &id);
}

fn to_event(stream: Stream, line: Line) -> Option<(String, Value)> {
    let (bytes, truncated) = match line {
        Line::Full(bytes) => (bytes, false),
        Line::Truncated(bytes) => (bytes, true),
    };
    if !truncated && bytes.trim_ascii().is_empty() {
        return None;
    }
    if stream == Stream::Stdout && !truncated {
        if let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(&bytes) {
            let kind = map
                .get("type")
                .and_then(Value::as_str)
                .filter(|k| {
                    !k.is_empty()
                        && k.len() <= 64
                        && !RESERVED.contains(k)
                        && k.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                })
                .map(str::to_owned);
            if let Some(kind) = kind {
                if kind == "user" || kind == "result" {
                    // The answered message's id is berth-init's to give (`on_lines`).
                    map.remove(REPLAY_MESSAGE_ID);
                }
                return Some((kind, Value::Object(map)));
            }
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    Some((
        "log".to_owned(),
        json!({"stream": stream.name(), "line": text, "truncated": truncated}),
    ))
}

fn log_event(stream: &str, line: &str) -> (String, Value) {
    (
        "log".to_owned(),
        json!({"stream": stream, "line": line, "truncated": false}),
    )
}

fn life_event(kind: &str, life: &HarnessLife) -> (String, Value) {
    (
        kind.to_owned(),
        serde_json::to_value(life).unwrap_or(Value::Null),
    )
}

/// Journals and publishes events (they are on disk before any reader sees them); returns
/// the seq of the last one.
pub fn emit(h: &Harness, batch: Vec<(String, Value)>) -> Option<u64> {
    let j = h.journals.as_ref()?;
    if batch.is_empty() {
        return None;
    }
    match lock(&j.events).append(batch) {
        Ok(seq) => {
            h.last_seq.send_replace(seq);
            Some(seq)
        }
        Err(err) => {
            eprintln!("berth-init: cannot journal harness events: {err}");
            None
        }
    }
}

/// The harness has message `id`: journal it and wake its delivery.
pub fn acknowledge(h: &Harness, id: &str) {
    if let Some(j) = &h.journals {
        if let Err(err) = lock(&j.messages).ack(id) {
            eprintln!("berth-init: cannot journal the acknowledgement of {id}: {err}");
        }
    }
    h.notify_changed();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_lines_become_events() {
        let obj = to_event(
            Stream::Stdout,
            Line::Full(br#"{"type":"assistant","x":1}"#.to_vec()),
        );
        assert_eq!(obj.unwrap().0, "assistant");
        let (kind, data) = to_event(Stream::Stdout, Line::Full(b"hello".to_vec())).unwrap();
        assert_eq!(kind, "log");
        assert_eq!(
            data,
            json!({"stream":"stdout","line":"hello","truncated":false})
        );
        let spoof = to_event(
            Stream::Stdout,
            Line::Full(br#"{"type":"harness_exit"}"#.to_vec()),
        );
        assert_eq!(spoof.unwrap().0, "log");
        let err = to_event(Stream::Stderr, Line::Full(br#"{"type":"result"}"#.to_vec()));
        assert_eq!(err.unwrap().1["stream"], "stderr");
        let (_, cut) = to_event(Stream::Stdout, Line::Truncated(b"xx".to_vec())).unwrap();
        assert_eq!(cut["truncated"], true);
        assert!(to_event(Stream::Stdout, Line::Full(b"  ".to_vec())).is_none());
        // A harness cannot name a message on a user line: that is berth-init's to do.
        let (_, claimed) = to_event(
            Stream::Stdout,
            Line::Full(br#"{"type":"user","message_id":"msg_x","message":{}}"#.to_vec()),
        )
        .unwrap();
        assert_eq!(claimed, json!({"type":"user","message":{}}));
    }
}
