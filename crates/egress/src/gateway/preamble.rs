//! The optional CONNECT preamble. berth-init's 3128 proxy forwards the client's
//! `CONNECT host:port HTTP/1.1` head before any TLS; its 443 listener forwards the
//! ClientHello directly. A TLS record starts with 0x16, which no HTTP method does, so the
//! first byte tells them apart.

use tokio::io::{AsyncRead, AsyncReadExt};

/// Largest CONNECT head (request line + headers) the gateway reads.
pub const MAX_CONNECT_HEAD_BYTES: usize = 8 * 1024;

/// TLS record type `handshake`: the first byte of every ClientHello record.
const TLS_HANDSHAKE: u8 = 0x16;
const CONNECT_PREFIX: &[u8] = b"CONNECT ";

/// What the box asked for in its CONNECT request, exactly as written (not yet canonical).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectTarget {
    pub host: String,
    pub port: u16,
}

#[derive(Debug, thiserror::Error)]
pub enum PreambleError {
    #[error("reading from the box")]
    Read(#[source] std::io::Error),
    #[error("the box closed the stream before sending anything")]
    Empty,
    #[error("the box closed the stream inside the CONNECT head")]
    Truncated,
    #[error("CONNECT head longer than {MAX_CONNECT_HEAD_BYTES} bytes")]
    TooLong,
    #[error("the stream starts with neither a TLS record nor `CONNECT `")]
    Unrecognised,
    #[error("request is not `CONNECT host:port HTTP/1.x`")]
    BadRequestLine,
    #[error("CONNECT target has no valid port")]
    BadPort,
}

/// What opened the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Preamble {
    /// The box's 443 listener: TLS straight away.
    Direct,
    Connect(ConnectTarget),
}

/// Reads the first bytes of the stream into `buf`. Returns [`Preamble::Direct`] when they
/// are TLS (they stay in `buf` as the start of the ClientHello), or the CONNECT target after
/// consuming the head; anything the client sent after the head stays in `buf`.
pub async fn read_preamble<R: AsyncRead + Unpin>(
    stream: &mut R,
    buf: &mut Vec<u8>,
) -> Result<Preamble, PreambleError> {
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(&first) = buf.first() {
            if first == TLS_HANDSHAKE {
                return Ok(Preamble::Direct);
            }
            // Refuse garbage as soon as it cannot become a CONNECT, rather than waiting for
            // a blank line that will never come.
            let n = buf.len().min(CONNECT_PREFIX.len());
            if buf[..n] != CONNECT_PREFIX[..n] {
                return Err(PreambleError::Unrecognised);
            }
            if let Some(end) = find_head_end(buf) {
                let target = parse_connect_head(&buf[..end])?;
                buf.drain(..end);
                return Ok(Preamble::Connect(target));
            }
            if buf.len() >= MAX_CONNECT_HEAD_BYTES {
                return Err(PreambleError::TooLong);
            }
        }
        // Never read past the cap, so a flood cannot grow the buffer.
        let room = (MAX_CONNECT_HEAD_BYTES - buf.len()).clamp(1, chunk.len());
        let n = stream
            .read(&mut chunk[..room])
            .await
            .map_err(PreambleError::Read)?;
        if n == 0 {
            return Err(if buf.is_empty() {
                PreambleError::Empty
            } else {
                PreambleError::Truncated
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The length of the head including its terminating blank line.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// Parses `CONNECT host:port HTTP/1.x\r\n<headers>\r\n\r\n`. Headers are ignored: the
/// target is the only thing the gateway takes from the box, and it is checked again against
/// the SNI.
pub fn parse_connect_head(head: &[u8]) -> Result<ConnectTarget, PreambleError> {
    let text = std::str::from_utf8(head).map_err(|_| PreambleError::BadRequestLine)?;
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(authority), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(PreambleError::BadRequestLine);
    };
    if method != "CONNECT" || !(version == "HTTP/1.1" || version == "HTTP/1.0") {
        return Err(PreambleError::BadRequestLine);
    }
    let (host, port) = split_authority(authority)?;
    Ok(ConnectTarget {
        host: host.to_owned(),
        port,
    })
}

/// `host:port` or `[v6]:port`. The port is required: CONNECT has no default.
fn split_authority(authority: &str) -> Result<(&str, u16), PreambleError> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or(PreambleError::BadRequestLine)?;
        let port = after.strip_prefix(':').ok_or(PreambleError::BadPort)?;
        (v6, port)
    } else {
        authority.rsplit_once(':').ok_or(PreambleError::BadPort)?
    };
    if host.is_empty() {
        return Err(PreambleError::BadRequestLine);
    }
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PreambleError::BadPort);
    }
    let port = port.parse::<u16>().map_err(|_| PreambleError::BadPort)?;
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_connect() {
        let t = parse_connect_head(b"CONNECT Api.Example.test.:443 HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        assert_eq!(t.host, "Api.Example.test.");
        assert_eq!(t.port, 443);
        let t = parse_connect_head(b"CONNECT [::1]:22 HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 22));
    }

    #[test]
    fn refuses_malformed_heads() {
        for bad in [
            &b"GET / HTTP/1.1\r\n\r\n"[..],
            b"CONNECT host HTTP/1.1\r\n\r\n",
            b"CONNECT host:https HTTP/1.1\r\n\r\n",
            b"CONNECT host:99999 HTTP/1.1\r\n\r\n",
            b"CONNECT host:+443 HTTP/1.1\r\n\r\n",
            b"CONNECT :443 HTTP/1.1\r\n\r\n",
            b"CONNECT host:443 HTTP/2\r\n\r\n",
            b"CONNECT  host:443 HTTP/1.1\r\n\r\n",
            b"CONNECT \xff:443 HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse_connect_head(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn keeps_bytes_after_the_head() {
        let mut input: &[u8] = b"CONNECT a.example:443 HTTP/1.1\r\n\r\n\x16\x03\x01";
        let mut buf = Vec::new();
        let p = read_preamble(&mut input, &mut buf).await.unwrap();
        assert!(matches!(p, Preamble::Connect(t) if t.host == "a.example"));
        assert_eq!(buf, b"\x16\x03\x01");
    }

    #[tokio::test]
    async fn tls_first_byte_is_direct() {
        let mut input: &[u8] = b"\x16\x03\x01\x00\x05";
        let mut buf = Vec::new();
        let p = read_preamble(&mut input, &mut buf).await.unwrap();
        assert_eq!(p, Preamble::Direct);
        assert_eq!(buf, b"\x16\x03\x01\x00\x05");
    }

    #[tokio::test]
    async fn refuses_garbage_early() {
        for garbage in [&b"GET / HTTP/1.1\r\n"[..], b"\x00\x01\x02", b"CONNECTX"] {
            let mut input: &[u8] = garbage;
            let mut buf = Vec::new();
            let err = read_preamble(&mut input, &mut buf).await.unwrap_err();
            assert!(matches!(err, PreambleError::Unrecognised), "{garbage:?}");
        }
    }

    #[tokio::test]
    async fn caps_the_head() {
        let mut flood = b"CONNECT ".to_vec();
        flood.resize(MAX_CONNECT_HEAD_BYTES * 4, b'A');
        let mut input: &[u8] = &flood;
        let mut buf = Vec::new();
        let err = read_preamble(&mut input, &mut buf).await.unwrap_err();
        assert!(matches!(err, PreambleError::TooLong));
        assert_eq!(buf.len(), MAX_CONNECT_HEAD_BYTES);
    }
}
