//! Request body framing (RFC 9112 §6): the gateway forwards exactly one request's body and
//! then stops reading from the box, so bytes after it (a pipelined second request) never
//! reach upstream unchecked.

use std::io;

use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};

/// The longest chunk-size or trailer line accepted.
const MAX_LINE: u64 = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (no Content-Length, no Transfer-Encoding).
    Empty,
    Length(u64),
    Chunked,
}

#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("copying the request body")]
    Io(#[source] io::Error),
    #[error("the box closed the stream inside the request body")]
    Truncated,
    #[error("a chunk-size or trailer line is malformed or too long")]
    BadChunk,
}

/// Copies one body of `framing` from `from` to `to`, flushing after each read so a
/// streamed upload is not held back.
pub async fn copy_body<R, W>(from: &mut R, to: &mut W, framing: Framing) -> Result<(), BodyError>
where
    R: AsyncBufRead + Unpin,
    W: AsyncWrite + Unpin,
{
    match framing {
        Framing::Empty => Ok(()),
        Framing::Length(n) => copy_exact(from, to, n).await,
        Framing::Chunked => loop {
            let line = read_line(from).await?;
            to.write_all(&line).await.map_err(BodyError::Io)?;
            let size = chunk_size(&line)?;
            if size == 0 {
                // Trailers, then the empty line that ends the message.
                loop {
                    let line = read_line(from).await?;
                    to.write_all(&line).await.map_err(BodyError::Io)?;
                    if line == b"\r\n" || line == b"\n" {
                        return to.flush().await.map_err(BodyError::Io);
                    }
                }
            }
            copy_exact(from, to, size).await?;
            let end = read_line(from).await?;
            if end != b"\r\n" && end != b"\n" {
                return Err(BodyError::BadChunk);
            }
            to.write_all(&end).await.map_err(BodyError::Io)?;
        },
    }
}

async fn copy_exact<R, W>(from: &mut R, to: &mut W, n: u64) -> Result<(), BodyError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut left = n;
    let mut buf = vec![0u8; 16 * 1024];
    while left > 0 {
        let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
        let got = from.read(&mut buf[..want]).await.map_err(BodyError::Io)?;
        if got == 0 {
            return Err(BodyError::Truncated);
        }
        to.write_all(&buf[..got]).await.map_err(BodyError::Io)?;
        to.flush().await.map_err(BodyError::Io)?;
        left -= got as u64;
    }
    Ok(())
}

pub(super) async fn read_line<R: AsyncBufRead + Unpin>(from: &mut R) -> Result<Vec<u8>, BodyError> {
    let mut line = Vec::new();
    (&mut *from)
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .await
        .map_err(BodyError::Io)?;
    if line.is_empty() {
        return Err(BodyError::Truncated);
    }
    if !line.ends_with(b"\n") {
        return Err(BodyError::BadChunk);
    }
    Ok(line)
}

/// `1a;ext=x\r\n` → 26. Extensions are passed on untouched.
pub(super) fn chunk_size(line: &[u8]) -> Result<u64, BodyError> {
    let hex = line
        .split(|b| *b == b';' || *b == b'\r' || *b == b'\n')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    if hex.is_empty() || hex.len() > 15 || !hex.iter().all(u8::is_ascii_hexdigit) {
        return Err(BodyError::BadChunk);
    }
    let text = std::str::from_utf8(hex).map_err(|_| BodyError::BadChunk)?;
    u64::from_str_radix(text, 16).map_err(|_| BodyError::BadChunk)
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn copy(input: &[u8], framing: Framing) -> (Result<(), BodyError>, Vec<u8>, Vec<u8>) {
        let mut from = tokio::io::BufReader::new(input);
        let mut out = Vec::new();
        let res = copy_body(&mut from, &mut out, framing).await;
        let mut rest = Vec::new();
        from.read_to_end(&mut rest).await.unwrap();
        (res, out, rest)
    }

    #[tokio::test]
    async fn length_stops_at_the_end_of_the_body() {
        let (res, out, rest) = copy(b"hello GET /next", Framing::Length(5)).await;
        res.unwrap();
        assert_eq!(
            (out.as_slice(), rest.as_slice()),
            (&b"hello"[..], &b" GET /next"[..])
        );
        let (res, _, _) = copy(b"hel", Framing::Length(5)).await;
        assert!(matches!(res, Err(BodyError::Truncated)));
    }

    #[tokio::test]
    async fn chunked_passes_through_and_stops_after_the_last_chunk() {
        let body = b"5;x=1\r\nhello\r\n0\r\nTrailer: t\r\n\r\nTRACE / HTTP/1.1\r\n";
        let (res, out, rest) = copy(body, Framing::Chunked).await;
        res.unwrap();
        assert_eq!(out, &body[..body.len() - 18]);
        assert_eq!(rest, b"TRACE / HTTP/1.1\r\n");
    }

    #[tokio::test]
    async fn bad_chunks_are_errors() {
        for bad in [
            &b"zz\r\nhello\r\n"[..],
            b"5\r\nhelloXX",
            b"5\r\nhel",
            b"fffffffffffffffff\r\n",
        ] {
            let (res, _, _) = copy(bad, Framing::Chunked).await;
            assert!(res.is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
