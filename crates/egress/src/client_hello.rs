//! The TLS ClientHello, read just far enough to route and refuse: the SNI, whether ECH is
//! offered, and the ALPN list. No I/O, no allocation beyond the reassembled handshake, and no
//! panic on any input (there is a `cargo fuzz` target in `crates/egress/fuzz`).
//!
//! The gateway calls [`parse_client_hello`] on everything it has buffered so far; while it
//! returns [`HelloError::Incomplete`] it reads more (up to [`MAX_CLIENT_HELLO_BYTES`]). The
//! bytes are later replayed to the upstream unchanged, so nothing here needs to re-encode.
//!
//! Fail closed (issue 4): no SNI, an unreadable or duplicated one, a name that is not a valid
//! public DNS name, an IP literal, or any form of Encrypted ClientHello is an error. With ECH
//! the SNI we can read is only the outer "public name", not where the box is really going.

use crate::hostname::{canonical_host, HostError};

/// The most bytes the gateway buffers looking for a complete ClientHello (record headers
/// included). Real ClientHellos, even with post-quantum key shares, are under 2 KiB.
pub const MAX_CLIENT_HELLO_BYTES: usize = 16 * 1024;

/// TLS record content type `handshake`.
const CONTENT_HANDSHAKE: u8 = 22;
/// Largest TLSPlaintext fragment (RFC 8446 §5.1).
const MAX_RECORD_PAYLOAD: usize = 1 << 14;
const RECORD_HEADER_LEN: usize = 5;
const HANDSHAKE_HEADER_LEN: usize = 4;
const HANDSHAKE_CLIENT_HELLO: u8 = 1;

const EXT_SERVER_NAME: u16 = 0;
const EXT_ALPN: u16 = 16;
/// `encrypted_client_hello` (RFC 9849 / draft-ietf-tls-esni-18 and later).
const EXT_ECH: u16 = 0xfe0d;
/// `ech_outer_extensions`: only legal inside an inner ClientHello; seeing it means ECH.
const EXT_ECH_OUTER_EXTENSIONS: u16 = 0xfd00;
/// Earlier ECH drafts (0xfe08..=0xfe0c) and the old ESNI extension: refused the same way.
const EXT_ECH_DRAFTS: std::ops::RangeInclusive<u16> = 0xfe08..=0xfe0c;
const EXT_ESNI: u16 = 0xffce;

const SERVER_NAME_HOST: u8 = 0;

/// What the gateway needs from a ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHelloInfo {
    /// The SNI host name, canonical (see [`canonical_host`]).
    pub sni: String,
    /// Whether ECH was offered. Always `false` from [`parse_client_hello`], which refuses
    /// ECH; kept so that a caller logging a refused hello can say so.
    pub offers_ech: bool,
    /// The ALPN protocol names, in the client's order (empty when not offered).
    pub alpn: Vec<Vec<u8>>,
}

/// Why the bytes are not (yet) an acceptable ClientHello.
#[derive(Debug, thiserror::Error)]
pub enum HelloError {
    /// Not an error yet: read more, until the buffer holds at least `needed` bytes in total.
    #[error("ClientHello incomplete: need at least {needed} bytes")]
    Incomplete { needed: usize },
    #[error("not a TLS record")]
    NotTls,
    #[error("TLS, but not a ClientHello")]
    NotClientHello,
    #[error("ClientHello larger than {MAX_CLIENT_HELLO_BYTES} bytes")]
    TooLarge,
    #[error("malformed ClientHello: {what}")]
    Malformed { what: &'static str },
    #[error("ClientHello has no server name (SNI)")]
    NoSni,
    #[error("ClientHello has more than one server name")]
    DuplicateSni,
    #[error("ClientHello server name is not a valid host name")]
    BadSni {
        #[source]
        source: HostError,
    },
    #[error("ClientHello server name is an IP address literal")]
    IpLiteralSni,
    #[error("ClientHello offers Encrypted ClientHello, which hides the real destination")]
    EchOffered,
}

impl HelloError {
    /// Whether reading more bytes could still make this a ClientHello.
    pub fn is_incomplete(&self) -> bool {
        matches!(self, HelloError::Incomplete { .. })
    }
}

/// Parses the TLS record(s) at the start of `buf` holding one ClientHello (it may span
/// several records — handshake fragmentation — and arrive in tiny pieces: `Incomplete` until
/// it is all there). Bytes after the record that completes the ClientHello are ignored.
/// Fails closed per issue 4: missing/unreadable/duplicated SNI, not a valid DNS name, an IP
/// literal, or ECH offered (extension 0xfe0d, also the outer `encrypted_client_hello`) → error.
pub fn parse_client_hello(buf: &[u8]) -> Result<ClientHelloInfo, HelloError> {
    let handshake = reassemble(buf)?;
    let raw = parse_body(&handshake[HANDSHAKE_HEADER_LEN..])?;
    if raw.offers_ech {
        return Err(HelloError::EchOffered);
    }
    let name = raw.sni.ok_or(HelloError::NoSni)?;
    // Non-UTF-8 bytes become U+FFFD, which `canonical_host` refuses as a bad label.
    let name = String::from_utf8_lossy(name);
    let sni = canonical_host(&name).map_err(|source| match source {
        HostError::IpLiteral => HelloError::IpLiteralSni,
        source => HelloError::BadSni { source },
    })?;
    Ok(ClientHelloInfo {
        sni,
        offers_ech: false,
        alpn: raw.alpn,
    })
}

/// Walks the handshake records at the start of `buf` and returns the complete ClientHello
/// handshake message (header included), refusing as early as the bytes allow.
fn reassemble(buf: &[u8]) -> Result<Vec<u8>, HelloError> {
    let mut handshake: Vec<u8> = Vec::new();
    let mut pos = 0usize;
    // Payload bytes the next record must at least carry (for a useful `Incomplete`).
    let mut next_needs = 0usize;
    loop {
        let first = pos == 0;
        let header = &buf[pos.min(buf.len())..];
        if let Some(&content_type) = header.first() {
            if content_type != CONTENT_HANDSHAKE {
                return Err(if !first {
                    // RFC 8446 §5.1: a fragmented handshake message must not be
                    // interleaved with other record types.
                    HelloError::Malformed {
                        what: "other record inside a fragmented ClientHello",
                    }
                } else if (20..=24).contains(&content_type) {
                    HelloError::NotClientHello
                } else {
                    HelloError::NotTls
                });
            }
        }
        if let Some(&major) = header.get(1) {
            if major != 3 {
                return Err(if first {
                    HelloError::NotTls
                } else {
                    HelloError::Malformed {
                        what: "record version",
                    }
                });
            }
        }
        if let Some(&minor) = header.get(2) {
            if minor > 4 {
                return Err(if first {
                    HelloError::NotTls
                } else {
                    HelloError::Malformed {
                        what: "record version",
                    }
                });
            }
        }
        if header.len() < RECORD_HEADER_LEN {
            return incomplete(pos + RECORD_HEADER_LEN + next_needs);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 {
            return Err(HelloError::Malformed {
                what: "empty handshake record",
            });
        }
        if len > MAX_RECORD_PAYLOAD {
            return Err(HelloError::TooLarge);
        }
        let end = pos + RECORD_HEADER_LEN + len;
        if end > MAX_CLIENT_HELLO_BYTES {
            return Err(HelloError::TooLarge);
        }
        let available = &header[RECORD_HEADER_LEN..header.len().min(RECORD_HEADER_LEN + len)];
        let handshake_after_record = handshake.len() + len;
        handshake.extend_from_slice(available);

        if let Some(&msg_type) = handshake.first() {
            if msg_type != HANDSHAKE_CLIENT_HELLO {
                return Err(HelloError::NotClientHello);
            }
        }
        let total = match handshake.get(1..HANDSHAKE_HEADER_LEN) {
            Some(&[a, b, c]) => {
                let body_len = (usize::from(a) << 16) | (usize::from(b) << 8) | usize::from(c);
                let total = HANDSHAKE_HEADER_LEN + body_len;
                if total > MAX_CLIENT_HELLO_BYTES {
                    return Err(HelloError::TooLarge);
                }
                if handshake_after_record > total {
                    // A client sends nothing after its ClientHello until the server answers.
                    return Err(HelloError::Malformed {
                        what: "data after the ClientHello in its record",
                    });
                }
                Some(total)
            }
            _ => None,
        };
        if buf.len() < end {
            return incomplete(end);
        }
        if total == Some(handshake.len()) {
            return Ok(handshake);
        }
        // The next record must carry the rest: at least its header and the missing bytes.
        next_needs = match total {
            Some(total) => total.saturating_sub(handshake.len()),
            None => HANDSHAKE_HEADER_LEN.saturating_sub(handshake.len()),
        };
        pos = end;
    }
}

fn incomplete<T>(needed: usize) -> Result<T, HelloError> {
    if needed > MAX_CLIENT_HELLO_BYTES {
        Err(HelloError::TooLarge)
    } else {
        Err(HelloError::Incomplete { needed })
    }
}

/// The fields of a ClientHello body before any policy is applied.
struct RawHello<'a> {
    sni: Option<&'a [u8]>,
    offers_ech: bool,
    alpn: Vec<Vec<u8>>,
}

/// Parses a ClientHello body (RFC 8446 §4.1.2; also TLS 1.0–1.2, whose layout is the same).
fn parse_body(body: &[u8]) -> Result<RawHello<'_>, HelloError> {
    let mut r = Reader::new(body);
    r.take(2, "legacy_version")?;
    r.take(32, "random")?;
    let session_id = r.vec8("legacy_session_id")?;
    if session_id.len() > 32 {
        return Err(HelloError::Malformed {
            what: "legacy_session_id longer than 32 bytes",
        });
    }
    let suites = r.vec16("cipher_suites")?;
    if suites.is_empty() || suites.len() % 2 != 0 {
        return Err(HelloError::Malformed {
            what: "cipher_suites",
        });
    }
    if r.vec8("legacy_compression_methods")?.is_empty() {
        return Err(HelloError::Malformed {
            what: "legacy_compression_methods",
        });
    }
    let mut raw = RawHello {
        sni: None,
        offers_ech: false,
        alpn: Vec::new(),
    };
    if r.is_empty() {
        // A hello without extensions has no SNI; `parse_client_hello` refuses it.
        return Ok(raw);
    }
    let extensions = r.vec16("extensions")?;
    if !r.is_empty() {
        return Err(HelloError::Malformed {
            what: "bytes after the extensions",
        });
    }
    let mut ext = Reader::new(extensions);
    let mut seen: Vec<u16> = Vec::new();
    let mut sni_seen = false;
    while !ext.is_empty() {
        let ext_type = ext.u16("extension type")?;
        let data = ext.vec16("extension data")?;
        if ext_type == EXT_SERVER_NAME {
            if sni_seen {
                return Err(HelloError::DuplicateSni);
            }
            sni_seen = true;
            raw.sni = parse_server_name(data)?;
        } else if seen.contains(&ext_type) {
            // RFC 8446 §4.2: at most one extension of each type.
            return Err(HelloError::Malformed {
                what: "duplicate extension",
            });
        }
        seen.push(ext_type);
        match ext_type {
            EXT_ALPN => raw.alpn = parse_alpn(data)?,
            EXT_ECH | EXT_ECH_OUTER_EXTENSIONS | EXT_ESNI => raw.offers_ech = true,
            t if EXT_ECH_DRAFTS.contains(&t) => raw.offers_ech = true,
            _ => {}
        }
    }
    Ok(raw)
}

/// `server_name` (RFC 6066 §3): the one `host_name` entry, `None` for an empty list.
fn parse_server_name(data: &[u8]) -> Result<Option<&[u8]>, HelloError> {
    let mut r = Reader::new(data);
    let list = r.vec16("server_name list")?;
    if !r.is_empty() {
        return Err(HelloError::Malformed {
            what: "bytes after the server_name list",
        });
    }
    let mut entries = Reader::new(list);
    let mut host = None;
    while !entries.is_empty() {
        let name_type = entries.u8("server name type")?;
        if name_type != SERVER_NAME_HOST {
            // Only host_name is defined, and an unknown type's layout cannot be skipped
            // with certainty (RFC 6066 §3), so refuse rather than guess.
            return Err(HelloError::Malformed {
                what: "unknown server name type",
            });
        }
        let name = entries.vec16("host_name")?;
        if host.is_some() {
            return Err(HelloError::DuplicateSni);
        }
        host = Some(name);
    }
    Ok(host)
}

/// `application_layer_protocol_negotiation` (RFC 7301 §3.1).
fn parse_alpn(data: &[u8]) -> Result<Vec<Vec<u8>>, HelloError> {
    let mut r = Reader::new(data);
    let list = r.vec16("ALPN list")?;
    if !r.is_empty() || list.is_empty() {
        return Err(HelloError::Malformed { what: "ALPN list" });
    }
    let mut names = Reader::new(list);
    let mut protocols = Vec::new();
    while !names.is_empty() {
        let name = names.vec8("ALPN protocol name")?;
        if name.is_empty() {
            return Err(HelloError::Malformed {
                what: "empty ALPN protocol name",
            });
        }
        protocols.push(name.to_vec());
    }
    Ok(protocols)
}

/// A bounds-checked cursor: every read that runs past the end is `Malformed { what }`.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { rest: buf }
    }

    fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HelloError> {
        if n > self.rest.len() {
            return Err(HelloError::Malformed { what });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, HelloError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HelloError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn vec8(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let len = self.u8(what)?;
        self.take(usize::from(len), what)
    }

    fn vec16(&mut self, what: &'static str) -> Result<&'a [u8], HelloError> {
        let len = self.u16(what)?;
        self.take(usize::from(len), what)
    }
}

#[cfg(test)]
mod tests;
