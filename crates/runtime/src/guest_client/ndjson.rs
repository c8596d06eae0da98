//! Newline-delimited JSON answers (exec frames, harness events), read one value at a time
//! with a bound on each line.

use berth_protocol::guest::MAX_NDJSON_LINE_BYTES;
use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use hyper::body::Incoming;

use super::error::GuestError;

/// A newline-delimited JSON response body, read one value at a time. A line longer than
/// its bound ends the stream with [`GuestError::TooLong`]: the buffer never holds more than
/// the bound plus one read.
pub struct NdjsonStream<T> {
    body: Incoming,
    buf: BytesMut,
    /// `buf[..scanned]` holds no newline (so a long line is not scanned again per read).
    scanned: usize,
    max_line: usize,
    done: bool,
    _item: std::marker::PhantomData<fn() -> T>,
}

impl<T: serde::de::DeserializeOwned> NdjsonStream<T> {
    pub(super) fn new(body: Incoming) -> Self {
        NdjsonStream {
            body,
            buf: BytesMut::new(),
            scanned: 0,
            max_line: MAX_NDJSON_LINE_BYTES,
            done: false,
            _item: std::marker::PhantomData,
        }
    }

    /// The next value, or `None` after the last one.
    pub async fn next_frame(&mut self) -> Result<Option<T>, GuestError> {
        loop {
            let newline = self.buf[self.scanned..].iter().position(|&b| b == b'\n');
            let line_len = newline.map_or(self.buf.len(), |i| self.scanned + i);
            if line_len > self.max_line {
                return Err(self.fail());
            }
            if let Some(pos) = newline.map(|i| self.scanned + i) {
                let line = self.buf.split_to(pos + 1);
                self.scanned = 0;
                if line.len() > 1 {
                    return Ok(Some(serde_json::from_slice(&line[..pos])?));
                }
                continue;
            }
            self.scanned = self.buf.len();
            if self.done {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let rest = self.buf.split();
                self.scanned = 0;
                return Ok(Some(serde_json::from_slice(&rest)?));
            }
            match self.body.frame().await {
                Some(frame) => {
                    if let Ok(mut data) = frame?.into_data() {
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            self.buf.extend_from_slice(chunk);
                            let n = chunk.len();
                            data.advance(n);
                        }
                    }
                }
                None => self.done = true,
            }
        }
    }

    /// The rest of the stream read as values of another type: an answer whose first line
    /// says what the lines after it are about.
    pub(super) fn retype<U>(self) -> NdjsonStream<U> {
        NdjsonStream {
            body: self.body,
            buf: self.buf,
            scanned: self.scanned,
            max_line: self.max_line,
            done: self.done,
            _item: std::marker::PhantomData,
        }
    }

    /// Ends the stream after a line over the bound: what was held is freed, and the next
    /// call answers `None`.
    fn fail(&mut self) -> GuestError {
        self.buf = BytesMut::new();
        self.scanned = 0;
        self.done = true;
        GuestError::TooLong {
            what: "NDJSON line",
            limit_bytes: self.max_line as u64,
        }
    }
}
