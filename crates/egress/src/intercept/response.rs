//! The response of an intercepted request, on its way back to the box: heads rewritten to
//! `Connection: close` with every secret taken out of them, the body decoded from its
//! upstream framing, scrubbed ([`super::scrub`]) and re-framed for the box (chunked to an
//! HTTP/1.1 client, ended by the close to an HTTP/1.0 one), because a replaced secret
//! changes the body's length. Streamed as it comes: each piece read is written and flushed.
//!
//! An encoded body (`Content-Encoding` other than `identity`, or a transfer coding other
//! than `chunked`) is refused with a 502: the gateway asked for `identity`, and compressed
//! bytes could carry a secret the scrubber cannot see.

use std::io;

use tokio::io::{AsyncBufRead, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

use super::body::{chunk_size, read_line, BodyError};
use super::http1::{read_head, HeadReadError, Kind, RequestShape, HOP_HEADERS, MAX_HEADERS};
use super::replay::Replay;
use super::scrub::Secrets;

/// How the upstream's response body ends (RFC 9112 §6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Upstream {
    /// HEAD, 1xx, 204, 304.
    NoBody,
    Length(u64),
    Chunked,
    UntilClose,
}

/// How the body goes to the box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToBox {
    NoBody,
    /// Re-framed chunked (an HTTP/1.1 client).
    Chunked,
    /// Ended by the close (an HTTP/1.0 client).
    UntilClose,
}

/// What the box was sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Relayed {
    /// The response, scrubbed.
    Response,
    /// A 502 instead of a body the gateway cannot scrub (its `Content-Encoding`).
    Encoded,
}

/// Relays the response to one request: interim (1xx) heads, then the final head and its
/// body, then closes toward the box (also when upstream ended uncleanly, so the box sees
/// the end).
pub async fn relay_response<R, W>(
    up: &mut R,
    to_box: &mut W,
    secrets: &Secrets,
    request: RequestShape,
) -> io::Result<Relayed>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let relayed = relay(up, to_box, secrets, request).await;
    let closed = to_box.shutdown().await;
    let relayed = relayed?;
    closed?;
    Ok(relayed)
}

async fn relay<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    up: &mut R,
    to_box: &mut W,
    secrets: &Secrets,
    request: RequestShape,
) -> io::Result<Relayed> {
    let mut buf = Vec::new();
    let framing = loop {
        let n = read_head(up, &mut buf, Kind::Response)
            .await
            .map_err(io::Error::other)?;
        let head = Head::parse(&buf[..n]).map_err(io::Error::other)?;
        let interim = (100..200).contains(&head.code) && head.code != 101;
        if interim {
            to_box.write_all(&head.rewrite(secrets, None)).await?;
            buf.drain(..n);
            continue;
        }
        let framing = match head.framing(request) {
            Some(framing) => framing,
            None => {
                let refusal =
                    b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                to_box.write_all(refusal).await?;
                return Ok(Relayed::Encoded);
            }
        };
        let body = match framing {
            Upstream::NoBody => ToBox::NoBody,
            _ if request.http10 => ToBox::UntilClose,
            _ => ToBox::Chunked,
        };
        to_box.write_all(&head.rewrite(secrets, Some(body))).await?;
        buf.drain(..n);
        break framing;
    };
    to_box.flush().await?;
    if framing == Upstream::NoBody {
        return Ok(Relayed::Response);
    }
    // What upstream sent after the head is the start of the body: read it first.
    let mut up = BufReader::new(Replay::new(buf, up));
    let mut decoder = Decoder::new(framing);
    let mut scrub = secrets.stream();
    let mut piece = vec![0u8; 16 * 1024];
    let mut out = Vec::new();
    let chunked = !request.http10;
    loop {
        let n = decoder
            .read(&mut up, &mut piece)
            .await
            .map_err(io::Error::other)?;
        out.clear();
        if n == 0 {
            scrub.finish(&mut out);
            write_piece(to_box, &out, chunked).await?;
            if chunked {
                to_box.write_all(b"0\r\n\r\n").await?;
            }
            to_box.flush().await?;
            return Ok(Relayed::Response);
        }
        scrub.push(&piece[..n], &mut out);
        write_piece(to_box, &out, chunked).await?;
        to_box.flush().await?;
    }
}

async fn write_piece<W: AsyncWrite + Unpin>(
    w: &mut W,
    piece: &[u8],
    chunked: bool,
) -> io::Result<()> {
    // An empty chunk would end the body.
    if piece.is_empty() {
        return Ok(());
    }
    if chunked {
        w.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
            .await?;
        w.write_all(piece).await?;
        w.write_all(b"\r\n").await
    } else {
        w.write_all(piece).await
    }
}

/// A parsed response head (owned, so the buffer it came from can be drained).
struct Head {
    version: u8,
    code: u16,
    reason: Vec<u8>,
    headers: Vec<(String, Vec<u8>)>,
}

impl Head {
    fn parse(bytes: &[u8]) -> Result<Head, HeadReadError> {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut resp = httparse::Response::new(&mut headers);
        resp.parse(bytes).map_err(HeadReadError::Malformed)?;
        let (Some(version), Some(code)) = (resp.version, resp.code) else {
            return Err(HeadReadError::Malformed(httparse::Error::Status));
        };
        Ok(Head {
            version,
            code,
            reason: resp.reason.unwrap_or("").as_bytes().to_vec(),
            headers: resp
                .headers
                .iter()
                .map(|h| (h.name.to_owned(), h.value.to_vec()))
                .collect(),
        })
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// How the body ends; `None` when it is encoded in a way the gateway will not relay.
    fn framing(&self, request: RequestShape) -> Option<Upstream> {
        if request.head_method || (100..200).contains(&self.code) || matches!(self.code, 204 | 304)
        {
            return Some(Upstream::NoBody);
        }
        let identity = |v: &[u8]| {
            v.split(|b| *b == b',').all(|c| {
                c.trim_ascii().eq_ignore_ascii_case(b"identity") || c.trim_ascii().is_empty()
            })
        };
        if !self.values("content-encoding").all(identity) {
            return None;
        }
        let mut codings = self.values("transfer-encoding").peekable();
        if codings.peek().is_some() {
            let chunked_only = codings.all(|v| {
                v.split(|b| *b == b',')
                    .map(<[u8]>::trim_ascii)
                    .filter(|c| !c.is_empty())
                    .all(|c| c.eq_ignore_ascii_case(b"chunked"))
            });
            return chunked_only.then_some(Upstream::Chunked);
        }
        let length = self
            .values("content-length")
            .next()
            .and_then(|v| std::str::from_utf8(v).ok()?.trim().parse::<u64>().ok());
        Some(length.map_or(Upstream::UntilClose, Upstream::Length))
    }

    /// The head for the box: hop-by-hop headers replaced by `Connection: close` (not on an
    /// interim head, `body` `None`), the framing headers by the box's own when the body is
    /// re-framed (a bodiless answer keeps its `Content-Length`), every secret taken out of
    /// the reason and the values.
    fn rewrite(&self, secrets: &Secrets, body: Option<ToBox>) -> Vec<u8> {
        let reframed = matches!(body, Some(ToBox::Chunked | ToBox::UntilClose));
        let mut out = Vec::with_capacity(256);
        // The gateway answers the box in its own version: a chunked body needs HTTP/1.1
        // (clients ignore Transfer-Encoding in an HTTP/1.0 response), and an HTTP/1.0
        // upstream's close-ended body is re-framed.
        let version = if body == Some(ToBox::Chunked) {
            1
        } else {
            self.version
        };
        out.extend_from_slice(format!("HTTP/1.{version} {} ", self.code).as_bytes());
        out.extend_from_slice(&secrets.replace_all(&self.reason));
        out.extend_from_slice(b"\r\n");
        for (name, value) in &self.headers {
            let lower = name.to_ascii_lowercase();
            let framing = matches!(lower.as_str(), "content-length" | "transfer-encoding");
            if HOP_HEADERS.contains(&lower.as_str())
                || lower == "transfer-encoding"
                || (reframed && framing)
            {
                continue;
            }
            out.extend_from_slice(&secrets.replace_all(name.as_bytes()));
            out.extend_from_slice(b": ");
            out.extend_from_slice(&secrets.replace_all(value));
            out.extend_from_slice(b"\r\n");
        }
        if body == Some(ToBox::Chunked) {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        if body.is_some() {
            out.extend_from_slice(b"connection: close\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// The upstream's body as plain bytes, whatever its framing.
enum Decoder {
    Length(u64),
    /// Bytes left in the current chunk; `None` before a chunk-size line.
    Chunk(Option<u64>),
    UntilClose,
    Done,
}

impl Decoder {
    fn new(framing: Upstream) -> Decoder {
        match framing {
            Upstream::NoBody => Decoder::Done,
            Upstream::Length(n) => Decoder::Length(n),
            Upstream::Chunked => Decoder::Chunk(None),
            Upstream::UntilClose => Decoder::UntilClose,
        }
    }

    /// Reads the next bytes of the body into `buf`; 0 at its end. Trailers are dropped:
    /// they could carry a secret too, and nothing a box needs is in them.
    async fn read<R: AsyncBufRead + Unpin>(
        &mut self,
        up: &mut R,
        buf: &mut [u8],
    ) -> Result<usize, BodyError> {
        loop {
            match self {
                Decoder::Done | Decoder::Length(0) => return Ok(0),
                Decoder::Length(left) => {
                    let want = (*left).min(buf.len() as u64) as usize;
                    let n = up.read(&mut buf[..want]).await.map_err(BodyError::Io)?;
                    if n == 0 {
                        return Err(BodyError::Truncated);
                    }
                    *left -= n as u64;
                    return Ok(n);
                }
                // Many servers end a close-delimited body by closing TCP without TLS's
                // close_notify; that is the body's end here, as it was for the box before
                // the gateway re-framed it (a Length or chunked body cut short is still an
                // error, which the box sees as a body without its last chunk).
                Decoder::UntilClose => {
                    return match up.read(buf).await {
                        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                        other => other.map_err(BodyError::Io),
                    }
                }
                Decoder::Chunk(None) => {
                    let size = chunk_size(&read_line(up).await?)?;
                    if size == 0 {
                        while !matches!(read_line(up).await?.as_slice(), b"\r\n" | b"\n") {}
                        *self = Decoder::Done;
                    } else {
                        *self = Decoder::Chunk(Some(size));
                    }
                }
                Decoder::Chunk(Some(left)) => {
                    let want = (*left).min(buf.len() as u64) as usize;
                    let n = up.read(&mut buf[..want]).await.map_err(BodyError::Io)?;
                    if n == 0 {
                        return Err(BodyError::Truncated);
                    }
                    *left -= n as u64;
                    if *left == 0 {
                        if !matches!(read_line(up).await?.as_slice(), b"\r\n" | b"\n") {
                            return Err(BodyError::BadChunk);
                        }
                        *self = Decoder::Chunk(None);
                    }
                    return Ok(n);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intercept::CredentialRule;

    fn secrets() -> Secrets {
        Secrets::new(&[
            CredentialRule::new("k", &["a.test"], "x-api-key", "PH", "sk-secret").unwrap(),
        ])
    }

    const GET: RequestShape = RequestShape {
        head_method: false,
        http10: false,
    };

    async fn relay_bytes(upstream: &[u8], request: RequestShape) -> (Relayed, String) {
        let mut up = upstream;
        let mut out = Vec::new();
        let relayed = relay_response(&mut up, &mut out, &secrets(), request)
            .await
            .unwrap();
        (relayed, String::from_utf8(out).unwrap())
    }

    #[tokio::test]
    async fn a_chunked_body_is_scrubbed_and_its_trailers_dropped() {
        let upstream = b"HTTP/1.1 200 OK\r\nx-echo: sk-secret\r\ntransfer-encoding: chunked\r\n\r\n4\r\nsk-s\r\n5;ext\r\necret\r\n0\r\nx-trailer: sk-secret\r\n\r\n";
        let (relayed, out) = relay_bytes(upstream, GET).await;
        assert_eq!(relayed, Relayed::Response);
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\nx-echo: PH\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n2\r\nPH\r\n0\r\n\r\n"
        );
    }

    #[tokio::test]
    async fn bodiless_answers_keep_their_length_and_encoded_ones_are_refused() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n";
        let shape = RequestShape {
            head_method: true,
            http10: false,
        };
        let (_, out) = relay_bytes(head, shape).await;
        assert_eq!(
            out,
            "HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\n"
        );
        let (_, out) = relay_bytes(b"HTTP/1.1 304 Not Modified\r\n\r\n", GET).await;
        assert_eq!(
            out,
            "HTTP/1.1 304 Not Modified\r\nconnection: close\r\n\r\n"
        );
        for encoded in [
            &b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: 1\r\n\r\nx"[..],
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n",
        ] {
            let (relayed, out) = relay_bytes(encoded, GET).await;
            assert_eq!(relayed, Relayed::Encoded);
            assert!(out.starts_with("HTTP/1.1 502 "), "{out}");
        }
        let (relayed, _) = relay_bytes(
            b"HTTP/1.1 200 OK\r\ncontent-encoding: identity\r\ncontent-length: 0\r\n\r\n",
            GET,
        )
        .await;
        assert_eq!(relayed, Relayed::Response);
    }

    #[tokio::test]
    async fn an_http10_box_gets_a_close_ended_body_and_a_cut_length_is_an_error() {
        let shape = RequestShape {
            head_method: false,
            http10: true,
        };
        let (_, out) = relay_bytes(
            b"HTTP/1.0 200 OK\r\ncontent-length: 9\r\n\r\nsk-secret",
            shape,
        )
        .await;
        assert_eq!(out, "HTTP/1.0 200 OK\r\nconnection: close\r\n\r\nPH");
        let mut up: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nsk-";
        let mut out = Vec::new();
        assert!(relay_response(&mut up, &mut out, &secrets(), GET)
            .await
            .is_err());
    }
}
