//! Connect's streaming envelopes: one flags byte, a 4-byte big-endian payload length, then the
//! payload. A streaming request body is a sequence of them, read here incrementally from
//! whatever chunks the transport delivers; a streaming response is a sequence of message
//! envelopes closed by one end-stream envelope, whose payload is always JSON.
//!
//! Memory is bounded by what the client has actually sent: an envelope's length is checked
//! against [`MAX_MESSAGE_BYTES`] as soon as its 5-byte header is complete, and its payload grows
//! only as its bytes arrive.

use std::collections::VecDeque;

use crate::codec::{Codec, WireMessage, MAX_MESSAGE_BYTES};
use crate::error::{ConnectError, WireError};

/// The payload is compressed with the call's negotiated encoding.
pub const FLAG_COMPRESSED: u8 = 0x01;
/// The last envelope of a response stream: a JSON end-stream message.
pub const FLAG_END_STREAM: u8 = 0x02;
/// Flags byte plus the 32-bit length.
const HEADER_LEN: usize = 5;

/// One complete envelope.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A message, in the call's codec.
    Message(Vec<u8>),
    /// An end-stream message (JSON). Only servers send one: in a request stream it is a
    /// protocol error, which the handler reports as `invalid_argument`.
    EndStream(Vec<u8>),
}

/// Reads envelopes out of a body that arrives in arbitrary chunks.
///
/// [`push`](Self::push) each chunk as it arrives, then take the frames it completed with
/// [`next_frame`](Self::next_frame) until `None`; at the end of the body call
/// [`finish`](Self::finish), which reports a body cut off inside an envelope. Only the envelope
/// being read is buffered beyond the frames waiting to be taken. After an error the decoder
/// returns that error again for any further input.
#[derive(Debug, Default)]
pub struct EnvelopeDecoder {
    header: [u8; HEADER_LEN],
    header_len: usize,
    /// The envelope whose header is complete and checked, and whose payload is being read.
    current: Option<Expected>,
    payload: Vec<u8>,
    ready: VecDeque<Frame>,
}

#[derive(Clone, Copy, Debug)]
struct Expected {
    end_stream: bool,
    payload_len: usize,
}

impl EnvelopeDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes one chunk of the body. Fails on the first envelope header that is malformed,
    /// marked compressed (no compression is ever negotiated, see [`crate::headers`]) or longer
    /// than [`MAX_MESSAGE_BYTES`], before any of that envelope's payload is kept.
    pub fn push(&mut self, mut input: &[u8]) -> Result<(), WireError> {
        loop {
            let Some(expected) = self.current else {
                if input.is_empty() {
                    return Ok(());
                }
                let take = (HEADER_LEN - self.header_len).min(input.len());
                self.header[self.header_len..self.header_len + take]
                    .copy_from_slice(&input[..take]);
                self.header_len += take;
                input = &input[take..];
                if self.header_len == HEADER_LEN {
                    self.current = Some(check_header(self.header)?);
                }
                continue;
            };
            let take = (expected.payload_len - self.payload.len()).min(input.len());
            self.payload.extend_from_slice(&input[..take]);
            input = &input[take..];
            if self.payload.len() < expected.payload_len {
                return Ok(());
            }
            let payload = std::mem::take(&mut self.payload);
            self.ready.push_back(match expected.end_stream {
                true => Frame::EndStream(payload),
                false => Frame::Message(payload),
            });
            self.current = None;
            self.header_len = 0;
        }
    }

    /// The oldest complete frame not yet taken.
    pub fn next_frame(&mut self) -> Option<Frame> {
        self.ready.pop_front()
    }

    /// Checks that the body ended between envelopes.
    pub fn finish(&self) -> Result<(), WireError> {
        match self.header_len {
            0 => Ok(()),
            header_len => Err(WireError::TruncatedEnvelope {
                buffered_bytes: header_len + self.payload.len(),
            }),
        }
    }
}

fn check_header(header: [u8; HEADER_LEN]) -> Result<Expected, WireError> {
    let flags = header[0];
    if flags & !(FLAG_COMPRESSED | FLAG_END_STREAM) != 0 {
        return Err(WireError::UnknownEnvelopeFlags { flags });
    }
    if flags & FLAG_COMPRESSED != 0 {
        return Err(WireError::CompressedWithoutEncoding);
    }
    let len = u32::from_be_bytes([header[1], header[2], header[3], header[4]]);
    match usize::try_from(len) {
        Ok(payload_len) if payload_len <= MAX_MESSAGE_BYTES => Ok(Expected {
            end_stream: flags & FLAG_END_STREAM != 0,
            payload_len,
        }),
        _ => Err(WireError::MessageTooLarge {
            len_bytes: u64::from(len),
            limit_bytes: MAX_MESSAGE_BYTES,
        }),
    }
}

/// A message envelope for a streaming response.
pub fn encode_message<M: WireMessage>(codec: Codec, message: &M) -> Result<Vec<u8>, WireError> {
    envelope(0, &codec.encode(message)?)
}

/// The envelope that ends a streaming response: `{}` after success, or
/// `{"error":{"code":…,"message":…},"metadata":{}}`. Always JSON, whatever the call's codec.
pub fn encode_end_stream(error: Option<&ConnectError>) -> Vec<u8> {
    let end = match error {
        None => serde_json::json!({}),
        Some(error) => serde_json::json!({"error": error, "metadata": {}}),
    };
    match envelope(FLAG_END_STREAM, end.to_string().as_bytes()) {
        Ok(frame) => frame,
        // Only a message over 4 GiB gets here; the code still reaches the client.
        Err(_) => encode_end_stream(
            error
                .map(|error| ConnectError::new(error.code, ""))
                .as_ref(),
        ),
    }
}

fn envelope(flags: u8, payload: &[u8]) -> Result<Vec<u8>, WireError> {
    let len = u32::try_from(payload.len()).map_err(|_| WireError::MessageTooLarge {
        len_bytes: payload.len() as u64,
        limit_bytes: u32::MAX as usize,
    })?;
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.push(flags);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(payload);
    Ok(frame)
}

#[cfg(test)]
#[path = "envelope_tests.rs"]
mod tests;
