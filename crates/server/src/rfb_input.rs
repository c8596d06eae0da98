//! Which bytes a VNC client sends are a person's input: the desktop's WebSocket
//! (`api/desktop_vnc.rs`) counts a key, a pointer move or click, or a paste as activity
//! that keeps the box awake, and everything else (the handshake, the requests for screen
//! updates a viewer sends all the time) as watching, which does not (`ARCHITECTURE.md`).
//!
//! [`InputWatch`] follows the client's half of RFB (RFC 6143) without buffering it: the
//! handshake (version, security type, the 16-byte answer of VNC authentication, ClientInit),
//! then each message's type and length. It holds at most one message's header (9 bytes)
//! and a count of bytes to skip, whatever the client sends.
//!
//! What it cannot follow (a security type with a handshake of its own, such as VeNCrypt or
//! Tight; a message type it does not know, which the server cannot parse either) leaves it
//! [lost](InputWatch::is_lost): from then on nothing counts as input. berth's desktop
//! (`berth-vnc`, x11vnc without a password on the box's loopback) offers security type
//! None, and noVNC sends only the messages below.

/// The client's version line: `RFB 003.008\n`.
const VERSION_BYTES: usize = 12;
/// The client's answer to VNC authentication's challenge.
const VNC_AUTH_BYTES: u64 = 16;
/// The longest header that decides a message's length (ClientFence's).
const MAX_HEAD: usize = 9;

/// Security types whose client side is followed.
const SECURITY_NONE: u8 = 1;
const SECURITY_VNC_AUTH: u8 = 2;

/// What part of the client's stream comes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The version line, `seen` bytes of it so far.
    Version {
        seen: usize,
        line: [u8; VERSION_BYTES],
    },
    /// The security type the client chose (3.7 and 3.8).
    SecurityType,
    /// The shared flag of ClientInit.
    ClientInit,
    /// Client messages.
    Messages,
    /// Out of step: nothing more is understood.
    Lost,
}

/// Follows one client's stream; see the module.
#[derive(Debug, Clone)]
pub struct InputWatch {
    phase: Phase,
    /// The current message's first bytes, until its length is known.
    head: [u8; MAX_HEAD],
    head_len: usize,
    /// Bytes of the current message (or handshake answer) still to pass over.
    skip: u64,
}

impl Default for InputWatch {
    fn default() -> Self {
        InputWatch {
            phase: Phase::Version {
                seen: 0,
                line: [0; VERSION_BYTES],
            },
            head: [0; MAX_HEAD],
            head_len: 0,
            skip: 0,
        }
    }
}

/// What a message's first bytes tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// More of the header is needed.
    NeedMore,
    /// The whole message is `len` bytes; `input`: a person's key, pointer or paste.
    Known { len: u64, input: bool },
    /// Not a message this client side of RFB has.
    Unknown,
}

impl InputWatch {
    /// Takes the next bytes the client sent; `true` when input began in them.
    pub fn feed(&mut self, mut bytes: &[u8]) -> bool {
        let mut input = false;
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = bytes
                    .len()
                    .min(usize::try_from(self.skip).unwrap_or(usize::MAX));
                self.skip -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let byte = bytes[0];
            bytes = &bytes[1..];
            input |= self.step(byte);
        }
        input
    }

    /// Whether the stream went out of step, so that nothing counts as input any more.
    pub fn is_lost(&self) -> bool {
        self.phase == Phase::Lost
    }

    /// One byte outside any skipped stretch; `true` when it completed the header of input.
    fn step(&mut self, byte: u8) -> bool {
        match &mut self.phase {
            Phase::Version { seen, line } => {
                line[*seen] = byte;
                *seen += 1;
                if *seen == VERSION_BYTES {
                    // 3.3: the server alone picks the security type, and offers none
                    // but None or VNC authentication; berth's offers None.
                    let chooses = &line[..] != b"RFB 003.003\n";
                    self.phase = if chooses {
                        Phase::SecurityType
                    } else {
                        Phase::ClientInit
                    };
                }
                false
            }
            Phase::SecurityType => {
                self.phase = match byte {
                    SECURITY_NONE => Phase::ClientInit,
                    SECURITY_VNC_AUTH => {
                        self.skip = VNC_AUTH_BYTES;
                        Phase::ClientInit
                    }
                    _ => Phase::Lost,
                };
                false
            }
            Phase::ClientInit => {
                self.phase = Phase::Messages;
                false
            }
            Phase::Messages => {
                self.head[self.head_len] = byte;
                self.head_len += 1;
                match shape(&self.head[..self.head_len]) {
                    Shape::NeedMore => false,
                    Shape::Known { len, input } => {
                        self.skip = len - self.head_len as u64;
                        self.head_len = 0;
                        input
                    }
                    Shape::Unknown => {
                        self.phase = Phase::Lost;
                        false
                    }
                }
            }
            Phase::Lost => false,
        }
    }
}

/// The length of the client message whose first bytes are `head` (never empty, at most
/// [`MAX_HEAD`]), and whether it is input. Types: RFC 6143 §7.5, and the extensions noVNC
/// sends (RFB's community protocol document).
fn shape(head: &[u8]) -> Shape {
    let known = |len: u64, input: bool| Shape::Known { len, input };
    let u16_at = |at: usize| u64::from(u16::from_be_bytes([head[at], head[at + 1]]));
    let have = |n: usize| head.len() >= n;
    match head[0] {
        // SetPixelFormat
        0 => known(20, false),
        // SetEncodings: a count of 4-byte encodings.
        2 if have(4) => known(4 + 4 * u16_at(2), false),
        // FramebufferUpdateRequest
        3 => known(10, false),
        // KeyEvent
        4 => known(8, true),
        // PointerEvent; with the marker bit of ExtendedMouseButtons, one byte more.
        5 if have(2) => known(if head[1] & 0x80 != 0 { 7 } else { 6 }, true),
        // ClientCutText: a length, negative (two's complement) for the extended clipboard,
        // whose first payload byte holds its actions: only notify (0x08) and provide
        // (0x10) carry what a person copied; caps, request and peek are the client's own.
        6 if have(8) => {
            let raw = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            if raw & 0x8000_0000 == 0 {
                known(8 + u64::from(raw), true)
            } else {
                let payload = u64::from(raw.wrapping_neg());
                match (payload, head.get(8)) {
                    (0, _) => known(8, false),
                    (_, Some(actions)) => known(8 + payload, actions & 0x18 != 0),
                    (_, None) => Shape::NeedMore,
                }
            }
        }
        // EnableContinuousUpdates
        150 => known(10, false),
        // ClientFence: a payload of at most 64 bytes, its length in the ninth.
        248 if have(9) => known(9 + u64::from(head[8]), false),
        // xvp: shut down, reboot or reset the machine.
        250 => known(4, true),
        // SetDesktopSize: 16 bytes a screen, their count in the seventh.
        251 if have(7) => known(8 + 16 * u64::from(head[6]), false),
        // QEMU's messages: only its extended key event (sub-type 0) is followed.
        255 if have(2) => match head[1] {
            0 => known(12, true),
            _ => Shape::Unknown,
        },
        2 | 5 | 6 | 248 | 251 | 255 => Shape::NeedMore,
        _ => Shape::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The handshake of a 3.8 client choosing security type None, then ClientInit.
    fn handshake() -> Vec<u8> {
        let mut bytes = b"RFB 003.008\n".to_vec();
        bytes.extend([SECURITY_NONE, 1]);
        bytes
    }

    fn pixel_format() -> Vec<u8> {
        let mut m = vec![0u8; 20];
        m[4] = 32;
        m
    }

    fn encodings(count: u16) -> Vec<u8> {
        let mut m = vec![2, 0];
        m.extend(count.to_be_bytes());
        for i in 0..count {
            m.extend((i32::from(i) - 200).to_be_bytes());
        }
        m
    }

    fn update_request() -> Vec<u8> {
        vec![3, 1, 0, 0, 0, 0, 4, 0, 3, 0]
    }

    fn key(down: bool) -> Vec<u8> {
        vec![4, u8::from(down), 0, 0, 0, 0, 0xff, 0x0d]
    }

    fn pointer(mask: u8) -> Vec<u8> {
        vec![5, mask, 0, 10, 0, 20]
    }

    fn cut_text(text: &[u8]) -> Vec<u8> {
        let mut m = vec![6, 0, 0, 0];
        m.extend((text.len() as u32).to_be_bytes());
        m.extend(text);
        m
    }

    fn extended_cut_text(actions: u8, rest: &[u8]) -> Vec<u8> {
        let mut payload = vec![actions, 0, 0, 1];
        payload.extend(rest);
        let mut m = vec![6, 0, 0, 0];
        m.extend((payload.len() as u32).wrapping_neg().to_be_bytes());
        m.extend(payload);
        m
    }

    fn fence(payload: &[u8]) -> Vec<u8> {
        let mut m = vec![248, 0, 0, 0, 0, 0, 0, 3, payload.len() as u8];
        m.extend(payload);
        m
    }

    fn desktop_size(screens: u8) -> Vec<u8> {
        let mut m = vec![251, 0, 4, 0, 3, 0, screens, 0];
        m.extend(vec![7; 16 * usize::from(screens)]);
        m
    }

    fn watched(bytes: &[u8]) -> (bool, InputWatch) {
        let mut watch = InputWatch::default();
        let input = watch.feed(bytes);
        (input, watch)
    }

    #[test]
    fn a_viewer_sends_no_input() {
        let mut stream = handshake();
        for part in [
            pixel_format(),
            encodings(12),
            update_request(),
            vec![150, 1, 0, 0, 0, 0, 4, 0, 3, 0],
            fence(b"abc"),
            desktop_size(2),
            extended_cut_text(0x01, &[0, 0, 0, 64]),
            extended_cut_text(0x02, &[]),
            update_request(),
        ] {
            stream.extend(part);
        }
        let (input, watch) = watched(&stream);
        assert!(!input);
        assert!(!watch.is_lost(), "it kept step");
    }

    #[test]
    fn keys_pointers_pastes_and_power_are_input() {
        for message in [
            key(true),
            pointer(0),
            pointer(1),
            vec![5, 0x81, 0, 10, 0, 20, 1],
            cut_text(b"hello"),
            extended_cut_text(0x08, &[]),
            extended_cut_text(0x10, b"zipped"),
            vec![250, 0, 1, 2],
            vec![255, 0, 0, 1, 0, 0, 0, 0x61, 0, 0, 0, 0x1e],
        ] {
            let mut watch = watched(&handshake()).1;
            assert!(watch.feed(&message), "{message:?} is input");
            // Nothing of it is left over: a viewer's message after it is not input.
            assert!(!watch.feed(&update_request()), "after {message:?}");
            assert!(!watch.is_lost(), "after {message:?}");
        }
    }

    #[test]
    fn bytes_may_come_split_anywhere() {
        let mut stream = handshake();
        let parts = [
            (encodings(3), false),
            (cut_text(&[b'x'; 300]), true),
            (fence(&[1; 64]), false),
            (extended_cut_text(0x10, b"abc"), true),
            (update_request(), false),
            (key(false), true),
        ];
        for (part, _) in &parts {
            stream.extend(part);
        }
        // One byte at a time: input is seen at the byte that completes its header.
        let mut watch = InputWatch::default();
        let seen = stream.iter().filter(|b| watch.feed(&[**b])).count();
        assert_eq!(seen, parts.iter().filter(|(_, input)| *input).count());
        assert!(!watch.is_lost());
        // In odd pieces, the same.
        for size in [2, 3, 5, 7, 64] {
            let mut watch = InputWatch::default();
            let seen = stream.chunks(size).filter(|c| watch.feed(c)).count();
            assert!(seen >= 1 && !watch.is_lost(), "pieces of {size}");
        }
    }

    #[test]
    fn vnc_authentication_and_version_3_3_are_followed() {
        let mut stream = b"RFB 003.008\n".to_vec();
        stream.push(SECURITY_VNC_AUTH);
        stream.extend([4; 16]); // the answer looks like key events, and is not one
        stream.push(1);
        let (input, mut watch) = watched(&stream);
        assert!(!input);
        assert!(watch.feed(&pointer(0)));

        let mut stream = b"RFB 003.003\n".to_vec();
        stream.push(1);
        let (input, mut watch) = watched(&stream);
        assert!(!input);
        assert!(watch.feed(&key(true)));
    }

    #[test]
    fn what_it_cannot_follow_counts_as_nothing() {
        // VeNCrypt's own handshake.
        let mut stream = b"RFB 003.008\n".to_vec();
        stream.extend([19, 0, 2]);
        let (_, mut watch) = watched(&stream);
        assert!(watch.is_lost());
        assert!(!watch.feed(&key(true)));
        // An unknown message type.
        let mut stream = handshake();
        stream.push(99);
        let (_, mut watch) = watched(&stream);
        assert!(watch.is_lost());
        assert!(!watch.feed(&pointer(1)));
    }

    #[test]
    fn a_huge_paste_is_skipped_not_held() {
        let mut watch = watched(&handshake()).1;
        let mut header = vec![6, 0, 0, 0];
        header.extend(0x7fff_ffffu32.to_be_bytes());
        assert!(watch.feed(&header));
        assert_eq!(watch.skip, 0x7fff_ffff);
        assert!(!watch.feed(&vec![4; 1 << 16]), "inside the paste");
        assert_eq!(watch.skip, 0x7fff_ffff - (1 << 16));
    }
}
