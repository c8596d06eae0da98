//! A box's event log as the CLI reads it: stored pages (`?wait=false`), the live SSE stream
//! with resume, and how one event is shown.

use std::time::Duration;

use http::Method;
use serde::Deserialize;

use crate::args::box_path;
use crate::client::{empty, Client, ClientError};
use crate::sse::{SseError, SseReader};

/// The longest silence on a live stream before we reconnect (keep-alives come every 15 s).
pub const STREAM_SILENCE: Duration = Duration::from_secs(45);

/// One stored event. Lenient: the API may add fields.
#[derive(Debug, Clone, Deserialize, serde::Serialize, PartialEq)]
pub struct Event {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub data: serde_json::Value,
    #[serde(default)]
    pub created_at: String,
}

#[derive(Debug, Deserialize)]
pub struct EventPage {
    pub events: Vec<Event>,
    pub next_after: u64,
    /// Events `first..=last` were pruned (retention) before this read.
    #[serde(default)]
    pub gap: Option<Gap>,
}

#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize, PartialEq, Eq)]
pub struct Gap {
    pub first: u64,
    pub last: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Sse(#[from] SseError),
    #[error("the daemon ended the event stream")]
    Ended,
    #[error("the daemon sent an event that is not berth's event JSON (id {id:?})")]
    Decode {
        id: Option<String>,
        #[source]
        source: serde_json::Error,
    },
}

impl StreamError {
    /// Worth reconnecting: the connection broke or went silent, or the daemon (or the
    /// box's node) is away.
    pub fn is_transport(&self) -> bool {
        match self {
            StreamError::Client(e) => e.is_transport() || e.is_unavailable(),
            StreamError::Sse(SseError::Body(_) | SseError::Silent(_)) | StreamError::Ended => true,
            StreamError::Sse(SseError::LineTooLong) | StreamError::Decode { .. } => false,
        }
    }
}

/// One stored page: the events with `seq > after` (at most 1000).
pub async fn page(client: &Client, name: &str, after: u64) -> Result<EventPage, ClientError> {
    let path = box_path(name, &format!("/events?after={after}&wait=false"));
    client
        .json(Method::GET, &path, None::<&()>, "an event page")
        .await
}

/// What `berth send` needs to know of a box's log before it posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPoint {
    /// The newest stored seq (0 when there is none).
    pub last_seq: u64,
    /// A `user` event was seen on the pages read: the harness replays user messages.
    pub replays: bool,
}

/// The newest stored seq, and whether the pages read show the harness replaying messages.
pub async fn log_point(client: &Client, name: &str) -> Result<LogPoint, ClientError> {
    let replays = std::cell::Cell::new(false);
    let last_seq = find_last_seq(|after| {
        let replays = &replays;
        async move {
            let page = page(client, name, after).await?;
            if page.events.iter().any(|e| e.kind == "user") {
                replays.set(true);
            }
            Ok(page.events.last().map(|e| e.seq))
        }
    })
    .await?;
    Ok(LogPoint {
        last_seq,
        replays: replays.get(),
    })
}

/// Pages read one after another before [`find_last_seq`] starts to gallop.
const PAGES_BEFORE_GALLOP: u32 = 2;
const FIRST_GALLOP_STEP: u64 = 2000;

/// Finds the newest seq `N` given `probe(after)`: the last seq of the stored page after
/// `after` (`None` when the page is empty, i.e. `N <= after`). A few pages are read in
/// order (a box's whole log is usually one page); a long log is then searched by galloping
/// and bisection, so the cost is logarithmic in its length. Relies on seqs having no gaps,
/// not on the page size.
async fn find_last_seq<F, Fut, E>(mut probe: F) -> Result<u64, E>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = Result<Option<u64>, E>>,
{
    // Invariant: lo <= N <= hi.
    let (mut lo, mut hi) = (0u64, u64::MAX);
    let mut pages = 0;
    let mut step = FIRST_GALLOP_STEP;
    while lo < hi {
        let after = if hi < u64::MAX {
            lo + (hi - lo) / 2
        } else if pages < PAGES_BEFORE_GALLOP {
            lo
        } else {
            let after = lo.saturating_add(step);
            step = step.saturating_mul(2);
            after
        };
        pages += 1;
        match probe(after).await? {
            None => hi = after,
            // A page after `after` ends at `last`, so N >= last > after >= lo.
            Some(last) => lo = last.max(after + 1),
        }
    }
    Ok(lo)
}

/// A live stream of events with `seq > after` that reconnects (resuming with
/// `Last-Event-ID`) whenever the connection breaks, for as long as the caller reads.
pub struct LiveEvents<'a> {
    client: &'a Client,
    name: String,
    after: u64,
    reader: Option<SseReader>,
    connected_once: bool,
    /// Reconnections in a row that failed; reset by every event.
    failures: u32,
    max_failures: u32,
}

impl<'a> LiveEvents<'a> {
    pub fn new(client: &'a Client, name: &str, after: u64, max_failures: u32) -> LiveEvents<'a> {
        LiveEvents {
            client,
            name: name.to_string(),
            after,
            reader: None,
            connected_once: false,
            failures: 0,
            max_failures,
        }
    }

    async fn connect(&mut self) -> Result<SseReader, StreamError> {
        // The first connection says where to start with `?after`, a reconnection with
        // `Last-Event-ID`, as a browser's EventSource would.
        let (path, headers) = if self.connected_once {
            (
                box_path(&self.name, "/events"),
                vec![("last-event-id", self.after.to_string())],
            )
        } else {
            (
                box_path(&self.name, &format!("/events?after={}", self.after)),
                Vec::new(),
            )
        };
        let response = self
            .client
            .send_with_headers(
                Method::GET,
                &path,
                "text/event-stream",
                None,
                None,
                &headers,
                empty(),
            )
            .await?;
        self.connected_once = true;
        Ok(SseReader::new(response.into_body(), STREAM_SILENCE))
    }

    /// The next event, reconnecting as needed; a transport failure is returned only after
    /// `max_failures` reconnections in a row failed.
    pub async fn next(&mut self) -> Result<Event, StreamError> {
        loop {
            let err = match self.read().await {
                Ok(Some(event)) => return Ok(event),
                Ok(None) => continue, // a repeat, or a new connection
                Err(e) => e,
            };
            if !err.is_transport() || self.failures >= self.max_failures {
                return Err(err);
            }
            self.reader = None;
            self.failures += 1;
            let backoff = Duration::from_millis(100 * u64::from(self.failures.min(20)));
            tokio::time::sleep(backoff).await;
        }
    }

    /// One step: connect if needed, or read one event; `Ok(None)` when there is nothing to
    /// return yet (connected, or an event already seen).
    async fn read(&mut self) -> Result<Option<Event>, StreamError> {
        let Some(reader) = self.reader.as_mut() else {
            self.reader = Some(self.connect().await?);
            return Ok(None);
        };
        // The daemon ending the stream (shutting down) is a reason to reconnect.
        let sse = reader.next().await?.ok_or(StreamError::Ended)?;
        let event: Event =
            serde_json::from_str(&sse.data).map_err(|source| StreamError::Decode {
                id: sse.id.clone(),
                source,
            })?;
        self.failures = 0;
        if event.seq <= self.after {
            return Ok(None); // already seen (a resume that overlapped)
        }
        self.after = event.seq;
        Ok(Some(event))
    }
}

/// The text blocks of a stream-json message's `content` (a string, or blocks with `text`).
pub fn content_text(content: &serde_json::Value) -> String {
    match content {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                serde_json::Value::String(s) => Some(s.as_str()),
                _ => b.get("text").and_then(|t| t.as_str()),
            })
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The text an `assistant` (or `user`) event carries: `data.message.content`.
pub fn message_text(event: &Event) -> String {
    event
        .data
        .get("message")
        .and_then(|m| m.get("content"))
        .map(content_text)
        .unwrap_or_default()
}

/// Human summary of an event for `berth logs`: one line, at most about `width` chars.
pub fn summary(event: &Event, width: usize) -> String {
    let d = &event.data;
    let s = |key: &str| d.get(key).and_then(|v| v.as_str()).map(str::to_string);
    let text = match event.kind.as_str() {
        "assistant" | "user" => message_text(event),
        "result" => {
            let verdict = if d.get("is_error").and_then(|v| v.as_bool()) == Some(true) {
                "error"
            } else {
                "ok"
            };
            match s("result") {
                Some(r) => format!("{verdict}: {r}"),
                None => verdict.into(),
            }
        }
        "log" => format!(
            "{}: {}",
            s("stream").unwrap_or_else(|| "?".into()),
            s("line").unwrap_or_default()
        ),
        "state" => match s("reason") {
            Some(reason) => format!("{} ({reason})", s("state").unwrap_or_default()),
            None => s("state").unwrap_or_default(),
        },
        "harness_start" | "harness_exit" | "harness_failed" => {
            let mut parts = Vec::new();
            for key in ["pid", "code", "signal", "restarts"] {
                if let Some(v) = d.get(key).filter(|v| !v.is_null()) {
                    parts.push(format!("{key}={v}"));
                }
            }
            if d.get("resumed").and_then(|v| v.as_bool()) == Some(true) {
                parts.push("resumed".into());
            }
            if let Some(reason) = s("reason") {
                parts.push(reason);
            }
            parts.join(" ")
        }
        "system" => match (s("subtype"), s("session_id")) {
            (Some(sub), Some(session)) => format!("{sub} session={session}"),
            (Some(sub), None) => sub,
            _ => d.to_string(),
        },
        _ => d.to_string(),
    };
    one_line(&text, width)
}

/// Newlines as `⏎`, control characters dropped, cut at `width` chars with `…`.
pub fn one_line(text: &str, width: usize) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n >= width {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push('⏎'),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(kind: &str, data: serde_json::Value) -> Event {
        Event {
            seq: 1,
            kind: kind.into(),
            data,
            created_at: String::new(),
        }
    }

    #[test]
    fn text_comes_from_strings_and_text_blocks() {
        let e = event(
            "assistant",
            json!({"message":{"content":[{"type":"text","text":"a"},{"type":"tool_use"},{"type":"text","text":"b"}]}}),
        );
        assert_eq!(message_text(&e), "ab");
        let e = event("user", json!({"message":{"role":"user","content":"hi"}}));
        assert_eq!(message_text(&e), "hi");
        assert_eq!(message_text(&event("assistant", json!({}))), "");
    }

    #[test]
    fn summaries_are_one_short_line() {
        let e = event(
            "assistant",
            json!({"message":{"content":[{"type":"text","text":"line 1\nline 2"}]}}),
        );
        assert_eq!(summary(&e, 80), "line 1⏎line 2");
        assert_eq!(summary(&e, 4), "line…");
        let e = event("result", json!({"is_error":true,"result":"boom"}));
        assert_eq!(summary(&e, 80), "error: boom");
        let e = event("log", json!({"stream":"stderr","line":"warn\u{1b}[0m"}));
        assert_eq!(summary(&e, 80), "stderr: warn[0m");
        let e = event("state", json!({"state":"failed","reason":"oom"}));
        assert_eq!(summary(&e, 80), "failed (oom)");
        let e = event(
            "harness_exit",
            json!({"pid":9,"code":1,"signal":null,"restarts":2,"resumed":true,"reason":null}),
        );
        assert_eq!(summary(&e, 80), "pid=9 code=1 restarts=2 resumed");
        let e = event("custom", json!({"k":1}));
        assert_eq!(summary(&e, 80), r#"{"k":1}"#);
    }

    /// A fake daemon: each accepted connection gets the next canned SSE body (then EOF);
    /// returns the request heads it saw.
    async fn sse_server(
        bodies: Vec<&'static str>,
    ) -> (Client, tokio::task::JoinHandle<Vec<String>>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let mut heads = Vec::new();
            for body in bodies {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    sock.read_exact(&mut byte).await.unwrap();
                    head.push(byte[0]);
                }
                heads.push(String::from_utf8(head).unwrap().to_ascii_lowercase());
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}"
                );
                sock.write_all(answer.as_bytes()).await.unwrap();
                sock.shutdown().await.unwrap();
            }
            heads
        });
        let target = crate::target::Target {
            url: crate::target::DaemonUrl::parse(&addr.to_string(), "test").unwrap(),
            api_key: "berth_k".into(),
            key_source: "test".into(),
            trust: crate::connector::Trust::WebRoots,
        };
        (Client::new(target), server)
    }

    #[tokio::test]
    async fn live_events_resume_with_last_event_id_and_skip_repeats() {
        let ev = |seq: u64| {
            format!(
                "id: {seq}\nevent: log\ndata: {{\"seq\":{seq},\"type\":\"log\",\"data\":{{}}}}\n\n"
            )
        };
        let first: &'static str = Box::leak(format!(": hi\n\n{}{}", ev(3), ev(4)).into_boxed_str());
        // The second connection repeats 4 (an overlapping resume) and goes on with 5.
        let second: &'static str = Box::leak(format!("{}{}", ev(4), ev(5)).into_boxed_str());
        let (client, server) = sse_server(vec![first, second]).await;
        let mut live = LiveEvents::new(&client, "bob", 2, 3);
        let seqs = [
            live.next().await.unwrap().seq,
            live.next().await.unwrap().seq,
            live.next().await.unwrap().seq,
        ];
        assert_eq!(seqs, [3, 4, 5]);
        let heads = server.await.unwrap();
        assert!(
            heads[0].starts_with("get /v1/boxes/bob/events?after=2 "),
            "{}",
            heads[0]
        );
        assert!(!heads[0].contains("last-event-id"), "{}", heads[0]);
        assert!(
            heads[1].starts_with("get /v1/boxes/bob/events "),
            "{}",
            heads[1]
        );
        assert!(heads[1].contains("last-event-id: 4"), "{}", heads[1]);
        assert!(
            heads[1].contains("accept: text/event-stream"),
            "{}",
            heads[1]
        );
    }

    #[tokio::test]
    async fn live_events_give_up_after_the_reconnect_budget() {
        let (client, server) = sse_server(vec![]).await;
        server.await.unwrap(); // the listener is gone: every connect is refused
        let mut live = LiveEvents::new(&client, "bob", 0, 2);
        let err = live.next().await.unwrap_err();
        assert!(err.is_transport(), "{err:?}");
    }

    /// `find_last_seq` against a log of `n` events served in pages of `cap`.
    fn last_of(n: u64, cap: u64) -> (u64, u32) {
        let mut calls = 0;
        let found = block_on(find_last_seq(|after| {
            calls += 1;
            let last = (after < n).then(|| n.min(after + cap));
            async move { Ok::<_, std::convert::Infallible>(last) }
        }))
        .unwrap();
        (found, calls)
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(future)
    }

    #[test]
    fn the_last_seq_is_found_with_few_pages() {
        for n in [
            0, 1, 2, 999, 1000, 1001, 2000, 2001, 5000, 123_457, 10_000_000,
        ] {
            for cap in [1, 7, 1000] {
                let (found, calls) = last_of(n, cap);
                assert_eq!(found, n, "n={n} cap={cap}");
                if n < cap {
                    assert!(calls <= 2, "n={n} cap={cap}: {calls} calls");
                }
                assert!(calls <= 80, "n={n} cap={cap}: {calls} calls");
            }
        }
    }

    #[test]
    fn pages_decode() {
        let page: EventPage = serde_json::from_value(json!({
            "events":[{"seq":1,"type":"state","data":{"state":"running"},"created_at":"t","x":0}],
            "next_after":1
        }))
        .unwrap();
        assert_eq!(page.events[0].kind, "state");
        assert_eq!(page.next_after, 1);
    }
}
