//! The TLS upstream on 127.0.0.1. After the handshake the client sends one request
//! ([`Request::encode`]: an op byte and a big-endian u64) and the server answers:
//! - `S` (setup): `pong`, then close;
//! - `D n` (download): `n` bytes, then close;
//! - `U n` (upload): reads `n` bytes, answers `done`, then close.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::runtime::one_worker;

/// Chunk size of bulk writes and reads: a few TLS records per call.
pub const CHUNK: usize = 64 * 1024;
pub const PONG: &[u8; 4] = b"pong";
pub const DONE: &[u8; 4] = b"done";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Setup,
    Download(u64),
    Upload(u64),
}

impl Request {
    pub const LEN: usize = 9;

    pub fn encode(self) -> [u8; Request::LEN] {
        let (op, n) = match self {
            Request::Setup => (b'S', 0),
            Request::Download(n) => (b'D', n),
            Request::Upload(n) => (b'U', n),
        };
        let mut out = [0u8; Request::LEN];
        out[0] = op;
        out[1..].copy_from_slice(&n.to_be_bytes());
        out
    }

    pub fn decode(bytes: &[u8; Request::LEN]) -> Option<Request> {
        let mut n = [0u8; 8];
        n.copy_from_slice(&bytes[1..]);
        let n = u64::from_be_bytes(n);
        match bytes[0] {
            b'S' => Some(Request::Setup),
            b'D' => Some(Request::Download(n)),
            b'U' => Some(Request::Upload(n)),
            _ => None,
        }
    }
}

/// The upstream, served on its own one-worker runtime until dropped.
pub struct Upstream {
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Upstream {
    pub fn start(config: Arc<ServerConfig>) -> io::Result<Upstream> {
        let runtime = one_worker("bench-upstream")?;
        let listener = {
            let _in = runtime.enter();
            let std = std::net::TcpListener::bind("127.0.0.1:0")?;
            std.set_nonblocking(true)?;
            TcpListener::from_std(std)?
        };
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(config);
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        // A failed request only ends that connection; the client reports it.
                        let _ = answer(tls).await;
                    }
                });
            }
        });
        Ok(Upstream {
            addr,
            runtime: Some(runtime),
        })
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

async fn answer<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) -> io::Result<()> {
    let mut head = [0u8; Request::LEN];
    s.read_exact(&mut head).await?;
    match Request::decode(&head) {
        Some(Request::Setup) => s.write_all(PONG).await?,
        Some(Request::Download(mut left)) => {
            let chunk = vec![0x5a; CHUNK];
            while left > 0 {
                let n = left.min(CHUNK as u64) as usize;
                s.write_all(&chunk[..n]).await?;
                left -= n as u64;
            }
        }
        Some(Request::Upload(mut left)) => {
            let mut chunk = vec![0; CHUNK];
            while left > 0 {
                let want = left.min(CHUNK as u64) as usize;
                let n = s.read(&mut chunk[..want]).await?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                left -= n as u64;
            }
            s.write_all(DONE).await?;
        }
        None => return Err(io::Error::other("unknown request")),
    }
    s.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_unknown_ops_are_refused() {
        for r in [
            Request::Setup,
            Request::Download(1 << 40),
            Request::Upload(7),
        ] {
            assert_eq!(Request::decode(&r.encode()), Some(r));
        }
        let mut bad = Request::Setup.encode();
        bad[0] = b'X';
        assert_eq!(Request::decode(&bad), None);
    }
}
