//! Server-Sent Events: an incremental parser for the `text/event-stream` format (what
//! `GET /v1/boxes/{ref}/events` streams) and a reader over a response body.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use hyper::body::Incoming;

/// Longest line we accept in an event stream; an event is one stored harness line, which the
/// daemon caps well below this.
const MAX_LINE_BYTES: usize = 32 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `id:` field (berth: the event's seq), if the event had one.
    pub id: Option<String>,
    /// The `event:` field; `message` when absent, as the SSE spec says.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("an event-stream line is longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong,
    #[error("reading the event stream")]
    Body(#[source] hyper::Error),
    #[error("the event stream was silent for {}s (no keep-alive)", .0.as_secs())]
    Silent(Duration),
}

/// Splits bytes into events as they arrive; comment lines (keep-alives) are skipped.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next one belongs to it.
    after_cr: bool,
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds bytes; returns the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, SseError> {
        let mut out = Vec::new();
        for &b in bytes {
            if self.after_cr {
                self.after_cr = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&line) {
                        out.push(event);
                    }
                }
                _ => {
                    if self.line.len() >= MAX_LINE_BYTES {
                        return Err(SseError::LineTooLong);
                    }
                    self.line.push(b);
                }
            }
        }
        Ok(out)
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take()?;
            return Some(SseEvent {
                id: self.id.take(),
                event: self.event.take().unwrap_or_else(|| "message".into()),
                data,
            });
        }
        if line.starts_with(b":") {
            return None; // a comment: keep-alive
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text.as_ref(), ""),
        };
        match field {
            "id" => self.id = Some(value.to_string()),
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {} // `retry` and unknown fields
        }
        None
    }
}

/// Events read from a streaming response body.
pub struct SseReader {
    body: Incoming,
    parser: SseParser,
    pending: std::collections::VecDeque<SseEvent>,
    /// The longest silence tolerated; the daemon sends a keep-alive every 15 s.
    silence: Duration,
}

impl SseReader {
    pub fn new(body: Incoming, silence: Duration) -> SseReader {
        SseReader {
            body,
            parser: SseParser::new(),
            pending: Default::default(),
            silence,
        }
    }

    /// The next event; `Ok(None)` when the server ended the stream.
    pub async fn next(&mut self) -> Result<Option<SseEvent>, SseError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(Some(event));
            }
            let frame = match tokio::time::timeout(self.silence, self.body.frame()).await {
                Err(_elapsed) => return Err(SseError::Silent(self.silence)),
                Ok(None) => return Ok(None),
                Ok(Some(frame)) => frame.map_err(SseError::Body)?,
            };
            if let Ok(data) = frame.into_data() {
                let data: Bytes = data;
                self.pending.extend(self.parser.push(&data)?);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        chunks
            .iter()
            .flat_map(|c| parser.push(c).unwrap())
            .collect()
    }

    #[test]
    fn events_comments_and_multiline_data() {
        let events = parse_all(&[
            b": keep-alive\n\nid: 1\nevent: state\ndata: {\"a\":1}\n\n",
            b"id:2\nevent:assistant\ndata: x\ndata: y\n\n",
        ]);
        assert_eq!(
            events,
            vec![
                SseEvent {
                    id: Some("1".into()),
                    event: "state".into(),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    id: Some("2".into()),
                    event: "assistant".into(),
                    data: "x\ny".into()
                },
            ]
        );
    }

    #[test]
    fn events_split_anywhere_and_crlf_line_ends() {
        let text = b"id: 7\r\nevent: result\r\ndata: {}\r\n\r\nid: 8\rdata: z\r\r";
        // Every split point gives the same events.
        for cut in 0..text.len() {
            let events = parse_all(&[&text[..cut], &text[cut..]]);
            assert_eq!(events.len(), 2, "cut at {cut}: {events:?}");
            assert_eq!(events[0].id.as_deref(), Some("7"));
            assert_eq!(events[0].event, "result");
            assert_eq!(events[1].event, "message");
            assert_eq!(events[1].data, "z");
        }
    }

    #[test]
    fn a_blank_line_without_data_dispatches_nothing() {
        assert!(parse_all(&[b"id: 3\n\n\n"]).is_empty());
    }
}
