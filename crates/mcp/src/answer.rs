//! Reading the API's answers, bounded: a JSON document up to a limit, a prefix of a file,
//! and a stream line by line. Nothing here holds more than its limit, whatever the daemon
//! (or whatever answers in its place) sends.

use bytes::{Buf, Bytes};
use http::StatusCode;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;

use crate::api::{AnswerBody, ApiAnswer};
use crate::error::ToolError;
use crate::limits::{MAX_ERROR_ANSWER_BYTES, MAX_JSON_ANSWER_BYTES};

/// The next chunk of a body; `None` at its end.
pub async fn next_chunk(body: &mut AnswerBody) -> Result<Option<Bytes>, ToolError> {
    loop {
        match body.frame().await {
            None => return Ok(None),
            Some(Err(source)) => return Err(ToolError::Body { source }),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// Up to `limit` bytes of the body, and whether more was there (not read past the limit).
pub async fn read_up_to(body: &mut AnswerBody, limit: usize) -> Result<(Vec<u8>, bool), ToolError> {
    let mut out = Vec::new();
    while let Some(chunk) = next_chunk(body).await? {
        let room = limit - out.len();
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, false))
}

/// Fails with the API's own error when the status is not a success.
pub async fn check(answer: ApiAnswer) -> Result<ApiAnswer, ToolError> {
    if answer.status.is_success() {
        return Ok(answer);
    }
    let status = answer.status;
    let mut body = answer.body;
    let (bytes, _more) = read_up_to(&mut body, MAX_ERROR_ANSWER_BYTES)
        .await
        .unwrap_or_default();
    Err(ToolError::from_answer(status, &bytes))
}

/// A successful JSON answer, decoded.
pub async fn json<T: DeserializeOwned>(
    answer: ApiAnswer,
    what: &'static str,
) -> Result<T, ToolError> {
    let mut body = check(answer).await?.body;
    let (bytes, more) = read_up_to(&mut body, MAX_JSON_ANSWER_BYTES).await?;
    if more {
        return Err(ToolError::TooLarge {
            what,
            limit_bytes: MAX_JSON_ANSWER_BYTES,
        });
    }
    serde_json::from_slice(&bytes).map_err(|source| ToolError::Decode { what, source })
}

/// A successful answer whose body says nothing (`204`).
pub async fn empty(answer: ApiAnswer) -> Result<StatusCode, ToolError> {
    check(answer).await.map(|a| a.status)
}

/// Splits a stream into lines (without `\n`, nor a `\r` before it). A line longer than
/// `max` is not kept: [`Line::TooLong`] stands for it, and reading goes on after it.
pub struct Lines {
    body: AnswerBody,
    max: usize,
    pending: Vec<u8>,
    /// Inside a line already known to be too long: drop bytes up to its `\n`.
    skipping: bool,
    chunk: Bytes,
}

#[derive(Debug, PartialEq)]
pub enum Line {
    Text(String),
    TooLong,
}

impl Lines {
    pub fn new(body: AnswerBody, max: usize) -> Lines {
        Lines {
            body,
            max,
            pending: Vec::new(),
            skipping: false,
            chunk: Bytes::new(),
        }
    }

    /// The next line; `None` once the stream ended (a last line without `\n` counts).
    pub async fn next(&mut self) -> Result<Option<Line>, ToolError> {
        loop {
            if let Some(line) = self.take_line() {
                return Ok(Some(line));
            }
            match next_chunk(&mut self.body).await? {
                Some(chunk) => self.chunk = chunk,
                None if self.pending.is_empty() && !self.skipping => return Ok(None),
                None => {
                    let was_skipping = std::mem::replace(&mut self.skipping, false);
                    let rest = std::mem::take(&mut self.pending);
                    return Ok(Some(if was_skipping {
                        Line::TooLong
                    } else {
                        text(rest)
                    }));
                }
            }
        }
    }

    /// A whole line out of what was read, if one is there.
    fn take_line(&mut self) -> Option<Line> {
        while !self.chunk.is_empty() {
            let newline = self.chunk.iter().position(|b| *b == b'\n');
            let end = newline.unwrap_or(self.chunk.len());
            if !self.skipping {
                if self.pending.len() + end > self.max {
                    self.skipping = true;
                    self.pending.clear();
                } else {
                    self.pending.extend_from_slice(&self.chunk[..end]);
                }
            }
            match newline {
                None => self.chunk.advance(end),
                Some(at) => {
                    self.chunk.advance(at + 1);
                    if std::mem::replace(&mut self.skipping, false) {
                        return Some(Line::TooLong);
                    }
                    return Some(text(std::mem::take(&mut self.pending)));
                }
            }
        }
        None
    }
}

fn text(mut bytes: Vec<u8>) -> Line {
    if bytes.last() == Some(&b'\r') {
        bytes.pop();
    }
    Line::Text(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::StreamBody;

    fn body(chunks: &[&'static [u8]]) -> AnswerBody {
        let frames: Vec<Result<_, crate::api::BoxError>> = chunks
            .iter()
            .map(|c| Ok(hyper::body::Frame::data(Bytes::from_static(c))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames)).boxed_unsync()
    }

    async fn all(mut lines: Lines) -> Vec<Line> {
        let mut out = Vec::new();
        while let Some(line) = lines.next().await.unwrap() {
            out.push(line);
        }
        out
    }

    #[tokio::test]
    async fn lines_span_chunks_and_long_ones_are_skipped() {
        let lines = Lines::new(body(&[b"ab", b"c\r\nxxxx", b"xxxx", b"x\nd\n", b"tail"]), 4);
        assert_eq!(
            all(lines).await,
            vec![
                Line::Text("abc".into()),
                Line::TooLong,
                Line::Text("d".into()),
                Line::Text("tail".into()),
            ]
        );
    }

    #[tokio::test]
    async fn reading_stops_at_the_limit() {
        let mut b = body(&[b"0123", b"4567", b"89"]);
        let (bytes, more) = read_up_to(&mut b, 6).await.unwrap();
        assert_eq!((bytes.as_slice(), more), (&b"012345"[..], true));
        let mut b = body(&[b"01"]);
        assert_eq!(
            read_up_to(&mut b, 2).await.unwrap(),
            (b"01".to_vec(), false)
        );
    }
}
