//! The hybrid vsock request a host client opens with: `CONNECT <port>\n` (Firecracker's
//! format, which `berth_runtime`'s guest client writes for both VM backends).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

/// The longest request line, newline included: `CONNECT 4294967295\n` is 19 bytes.
pub const MAX_LINE: usize = 32;
/// How long a client may take to send its request.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a client's request was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    #[error("no request line within {0:?}")]
    Timeout(Duration),
    #[error("the request line is longer than {MAX_LINE} bytes")]
    TooLong,
    #[error("the client closed before a whole request line")]
    Closed,
    #[error("the request line is not `CONNECT <port>`: {0:?}")]
    Malformed(String),
    #[error("cannot read the request line")]
    Read(#[source] std::io::Error),
}

/// A client's request: the port, and whatever the client sent after the newline (which
/// belongs to the stream).
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    pub port: u32,
    pub early: Vec<u8>,
}

/// Reads one request line from `client`, at most [`MAX_LINE`] bytes within `timeout`.
pub async fn read<R: AsyncRead + Unpin>(
    client: &mut R,
    timeout: Duration,
) -> Result<Request, LineError> {
    tokio::time::timeout(timeout, read_line(client))
        .await
        .map_err(|_| LineError::Timeout(timeout))?
}

async fn read_line<R: AsyncRead + Unpin>(client: &mut R) -> Result<Request, LineError> {
    let mut buf = [0u8; MAX_LINE];
    let mut filled = 0;
    loop {
        let n = client
            .read(&mut buf[filled..])
            .await
            .map_err(LineError::Read)?;
        if n == 0 {
            return Err(LineError::Closed);
        }
        let start = filled;
        filled += n;
        if let Some(at) = buf[start..filled].iter().position(|&b| b == b'\n') {
            let end = start + at;
            return Ok(Request {
                port: parse(&buf[..end])?,
                early: buf[end + 1..filled].to_vec(),
            });
        }
        if filled == MAX_LINE {
            return Err(LineError::TooLong);
        }
    }
}

/// `CONNECT <decimal port>` (a trailing `\r` is tolerated).
fn parse(line: &[u8]) -> Result<u32, LineError> {
    let malformed = || LineError::Malformed(String::from_utf8_lossy(line).into_owned());
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let digits = line.strip_prefix(b"CONNECT ").ok_or_else(malformed)?;
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(malformed());
    }
    std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or_else(malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    async fn request(bytes: &[u8]) -> Result<Request, LineError> {
        let (mut client, mut bridge) = tokio::io::duplex(64);
        client.write_all(bytes).await.unwrap();
        drop(client);
        read(&mut bridge, LINE_TIMEOUT).await
    }

    #[tokio::test]
    async fn takes_the_port_and_keeps_what_follows_the_newline() {
        let req = request(b"CONNECT 2024\nGET /").await.unwrap();
        assert_eq!(
            req,
            Request {
                port: 2024,
                early: b"GET /".to_vec()
            }
        );
        assert_eq!(
            request(b"CONNECT 4294967295\r\n").await.unwrap().port,
            u32::MAX
        );
    }

    #[tokio::test]
    async fn refuses_what_is_not_a_connect_line() {
        for bad in [
            &b"CONNECT\n"[..],
            b"CONNECT \n",
            b"CONNECT 4294967296\n",
            b"CONNECT +1\n",
            b"connect 2024\n",
            b"CONNECT 2024 x\n",
        ] {
            let err = request(bad).await.unwrap_err();
            assert!(matches!(err, LineError::Malformed(_)), "{bad:?}: {err}");
        }
        assert!(matches!(
            request(b"CONNECT 20").await,
            Err(LineError::Closed)
        ));
    }

    #[tokio::test]
    async fn a_line_past_the_bound_is_refused_without_reading_on() {
        let (mut client, mut bridge) = tokio::io::duplex(4096);
        client.write_all(&[b'A'; 4096]).await.unwrap();
        let err = read(&mut bridge, LINE_TIMEOUT).await.unwrap_err();
        assert!(matches!(err, LineError::TooLong), "{err}");
    }

    #[tokio::test]
    async fn a_silent_client_times_out() {
        let (_client, mut bridge) = tokio::io::duplex(64);
        let err = read(&mut bridge, Duration::from_millis(50))
            .await
            .unwrap_err();
        assert!(matches!(err, LineError::Timeout(_)), "{err}");
    }
}
