//! The frame codec: `kind` (1 byte), then for every kind but PAD a stream id (u32 BE), a
//! payload length (u32 BE) and the payload. Decoding is strict (an unknown kind, a length
//! over [`MAX_PAYLOAD`] or the wrong length for the kind is a [`Violation`]) and checks
//! the header before the payload arrives, so a bad length is caught without buffering it.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::Violation;

/// Largest payload of one frame.
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Kind, stream id, payload length.
pub const HEADER_LEN: usize = 9;
/// HELLO's payload: the magic, then the version.
pub const MAGIC: &[u8; 8] = b"berthmux";
pub const VERSION: u32 = 1;
const HELLO_LEN: u32 = MAGIC.len() as u32 + 4;
/// A HELLO's header and magic: what a host scans the incoming bytes for.
pub const HELLO_PREFIX: [u8; HEADER_LEN + 8] = {
    let mut p = [0u8; HEADER_LEN + 8];
    p[0] = Kind::Hello as u8;
    p[8] = HELLO_LEN as u8;
    let mut i = 0;
    while i < MAGIC.len() {
        p[HEADER_LEN + i] = MAGIC[i];
        i += 1;
    }
    p
};
/// The zero run a host writes before its HELLO: longer than any frame, so a guest in the
/// middle of one completes it and then reads single-byte PADs up to the HELLO.
pub const SYNC_LEN: usize = 65552;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Pad = 0,
    Hello = 1,
    Open = 2,
    Accept = 3,
    Data = 4,
    Credit = 5,
    Shutdown = 6,
    Reset = 7,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            0 => Kind::Pad,
            1 => Kind::Hello,
            2 => Kind::Open,
            3 => Kind::Accept,
            4 => Kind::Data,
            5 => Kind::Credit,
            6 => Kind::Shutdown,
            7 => Kind::Reset,
            _ => return None,
        })
    }

    /// Whether `len` is a valid payload length for this kind.
    fn allows_len(self, len: u32) -> bool {
        match self {
            Kind::Pad | Kind::Accept | Kind::Shutdown | Kind::Reset => len == 0,
            Kind::Hello => len == HELLO_LEN,
            Kind::Open | Kind::Credit => len == 4,
            Kind::Data => len >= 1 && len as usize <= MAX_PAYLOAD,
        }
    }
}

/// One decoded frame (PADs are skipped by the decoder, never returned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Hello,
    Open { id: u32, port: u32 },
    Accept { id: u32 },
    Data { id: u32, data: Bytes },
    Credit { id: u32, bytes: u32 },
    Shutdown { id: u32 },
    Reset { id: u32 },
}

/// What the writer sends: a frame, or the zero run before a HELLO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    Sync,
    Frame(Frame),
}

impl Out {
    /// Bytes this takes on the wire.
    #[cfg(test)]
    pub fn wire_len(&self) -> usize {
        match self {
            Out::Sync => SYNC_LEN,
            Out::Frame(Frame::Hello) => HEADER_LEN + HELLO_LEN as usize,
            Out::Frame(Frame::Open { .. } | Frame::Credit { .. }) => HEADER_LEN + 4,
            Out::Frame(Frame::Data { data, .. }) => HEADER_LEN + data.len(),
            Out::Frame(Frame::Accept { .. } | Frame::Shutdown { .. } | Frame::Reset { .. }) => {
                HEADER_LEN
            }
        }
    }

    pub fn encode(&self, out: &mut BytesMut) {
        let frame = match self {
            Out::Sync => {
                out.put_bytes(Kind::Pad as u8, SYNC_LEN);
                return;
            }
            Out::Frame(frame) => frame,
        };
        let header = |out: &mut BytesMut, kind: Kind, id: u32, len: usize| {
            out.put_u8(kind as u8);
            out.put_u32(id);
            out.put_u32(len as u32);
        };
        match frame {
            Frame::Hello => {
                header(out, Kind::Hello, 0, HELLO_LEN as usize);
                out.put_slice(MAGIC);
                out.put_u32(VERSION);
            }
            Frame::Open { id, port } => {
                header(out, Kind::Open, *id, 4);
                out.put_u32(*port);
            }
            Frame::Credit { id, bytes } => {
                header(out, Kind::Credit, *id, 4);
                out.put_u32(*bytes);
            }
            Frame::Data { id, data } => {
                header(out, Kind::Data, *id, data.len());
                out.put_slice(data);
            }
            Frame::Accept { id } => header(out, Kind::Accept, *id, 0),
            Frame::Shutdown { id } => header(out, Kind::Shutdown, *id, 0),
            Frame::Reset { id } => header(out, Kind::Reset, *id, 0),
        }
    }
}

/// Takes the next frame off the front of `buf`: `Ok(None)` when more bytes are needed.
/// Leading PADs are consumed. On a violation `buf` is left as it was at the bad frame.
pub fn decode(buf: &mut BytesMut) -> Result<Option<Frame>, Violation> {
    let pads = buf.iter().take_while(|&&b| b == Kind::Pad as u8).count();
    buf.advance(pads);
    if buf.is_empty() {
        return Ok(None);
    }
    let kind = Kind::from_byte(buf[0]).ok_or(Violation::UnknownKind { kind: buf[0] })?;
    if buf.len() < HEADER_LEN {
        return Ok(None);
    }
    let id = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    let len = u32::from_be_bytes([buf[5], buf[6], buf[7], buf[8]]);
    if len as usize > MAX_PAYLOAD {
        return Err(Violation::Oversized { len });
    }
    if !kind.allows_len(len) {
        return Err(Violation::BadLength {
            kind: kind as u8,
            len,
        });
    }
    if buf.len() < HEADER_LEN + len as usize {
        return Ok(None);
    }
    if kind == Kind::Hello {
        let payload = &buf[HEADER_LEN..HEADER_LEN + len as usize];
        let version = u32::from_be_bytes([payload[8], payload[9], payload[10], payload[11]]);
        if id != 0 || &payload[..8] != MAGIC || version != VERSION {
            return Err(Violation::BadHello);
        }
    }
    buf.advance(HEADER_LEN);
    let mut payload = buf.split_to(len as usize);
    let u32_payload = |p: &mut BytesMut| p.get_u32();
    Ok(Some(match kind {
        Kind::Hello => Frame::Hello,
        Kind::Open => Frame::Open {
            id,
            port: u32_payload(&mut payload),
        },
        Kind::Accept => Frame::Accept { id },
        Kind::Data => Frame::Data {
            id,
            data: payload.freeze(),
        },
        Kind::Credit => Frame::Credit {
            id,
            bytes: u32_payload(&mut payload),
        },
        Kind::Shutdown => Frame::Shutdown { id },
        Kind::Reset => Frame::Reset { id },
        // Consumed above: a PAD is never a frame.
        Kind::Pad => return decode(buf),
    }))
}

/// Drops everything in `buf` before the first [`HELLO_PREFIX`]; `true` once `buf` starts
/// with it. Keeps a tail that may be the start of one.
pub fn scan_to_hello(buf: &mut BytesMut) -> bool {
    if let Some(at) = buf
        .windows(HELLO_PREFIX.len())
        .position(|w| w == HELLO_PREFIX)
    {
        buf.advance(at);
        return true;
    }
    let keep = HELLO_PREFIX.len() - 1;
    if buf.len() > keep {
        let drop = buf.len() - keep;
        buf.advance(drop);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(frames: &[Out]) -> BytesMut {
        let mut buf = BytesMut::new();
        for f in frames {
            let before = buf.len();
            f.encode(&mut buf);
            assert_eq!(buf.len() - before, f.wire_len(), "{f:?}");
        }
        buf
    }

    #[test]
    fn every_frame_round_trips_and_pads_are_one_byte() {
        let frames = [
            Frame::Hello,
            Frame::Open { id: 2, port: 2024 },
            Frame::Accept { id: 2 },
            Frame::Data {
                id: 3,
                data: Bytes::from(vec![7u8; MAX_PAYLOAD]),
            },
            Frame::Credit {
                id: 3,
                bytes: 131072,
            },
            Frame::Shutdown { id: 2 },
            Frame::Reset { id: u32::MAX },
        ];
        let mut buf = BytesMut::new();
        for f in &frames {
            buf.put_u8(0); // a PAD between frames
            Out::Frame(f.clone()).encode(&mut buf);
        }
        buf.put_u8(0);
        // Fed one byte at a time: a partial frame is "need more", never an error.
        let mut input = BytesMut::new();
        let mut got = Vec::new();
        for b in buf {
            input.put_u8(b);
            while let Some(f) = decode(&mut input).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, frames);
        assert!(input.is_empty());
    }

    #[test]
    fn bad_headers_are_violations_before_their_payload_arrives() {
        let mut buf = BytesMut::from(&[Kind::Data as u8, 0, 0, 0, 1, 0, 1, 0, 1][..]);
        assert_eq!(decode(&mut buf), Err(Violation::Oversized { len: 65537 }));
        let mut buf = BytesMut::from(&[8u8][..]);
        assert_eq!(decode(&mut buf), Err(Violation::UnknownKind { kind: 8 }));
        let mut buf = BytesMut::from(&[Kind::Data as u8, 0, 0, 0, 1, 0, 0, 0, 0][..]);
        assert_eq!(
            decode(&mut buf),
            Err(Violation::BadLength { kind: 4, len: 0 })
        );
        let mut buf = BytesMut::from(&[Kind::Reset as u8, 0, 0, 0, 1, 0, 0, 0, 4][..]);
        assert!(matches!(decode(&mut buf), Err(Violation::BadLength { .. })));
        let mut hello = wire(&[Out::Frame(Frame::Hello)]);
        let last = hello.len() - 1;
        hello[last] = 2; // version 2
        assert_eq!(decode(&mut hello), Err(Violation::BadHello));
    }

    #[test]
    fn the_sync_run_completes_any_partial_frame_and_leaves_the_hello_aligned() {
        // A DATA header announcing 60000 bytes, 1000 of them, then SYNC + HELLO.
        let mut buf = BytesMut::new();
        buf.put_u8(Kind::Data as u8);
        buf.put_u32(5);
        buf.put_u32(60000);
        buf.put_bytes(9, 1000);
        buf.extend_from_slice(&wire(&[Out::Sync, Out::Frame(Frame::Hello)]));
        let first = decode(&mut buf).unwrap().unwrap();
        assert!(matches!(first, Frame::Data { id: 5, ref data } if data.len() == 60000));
        assert_eq!(decode(&mut buf).unwrap(), Some(Frame::Hello));
        // A header cut after its length's first byte: completed with zeros, never larger.
        let mut buf = BytesMut::from(&[Kind::Data as u8, 0, 0, 0, 1, 0][..]);
        buf.extend_from_slice(&wire(&[Out::Sync, Out::Frame(Frame::Hello)]));
        assert_eq!(
            decode(&mut buf),
            Err(Violation::BadLength { kind: 4, len: 0 })
        );
    }

    #[test]
    fn scanning_finds_a_hello_behind_garbage_even_split_across_reads() {
        let hello = wire(&[Out::Frame(Frame::Hello)]);
        let mut garbage = BytesMut::from(&b"\x04\x00\x00\x00\x03\x00\x00\xff\xffjunk"[..]);
        garbage.extend_from_slice(&hello[..10]);
        assert!(!scan_to_hello(&mut garbage));
        assert!(garbage.len() < HELLO_PREFIX.len());
        garbage.extend_from_slice(&hello[10..]);
        assert!(scan_to_hello(&mut garbage));
        assert_eq!(decode(&mut garbage).unwrap(), Some(Frame::Hello));
    }
}
