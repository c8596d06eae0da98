//! Dialling the vetted address and splicing bytes both ways, counted as they pass so that
//! the audit line has the totals even when the connection is cut by a shutdown.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Copy buffer per direction. tokio's default 8 KiB costs a syscall pair per 8 KiB, so the
/// gateway burned as much CPU as the TLS endpoints and halved loopback throughput; 64 KiB
/// beats nginx both ways (benches/benches/egress.rs, docs/benchmarks.md).
const SPLICE_BUF: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error("connecting to {addr} timed out after {after:?}")]
    Timeout { addr: SocketAddr, after: Duration },
    #[error("connecting to {addr}")]
    Connect {
        addr: SocketAddr,
        #[source]
        source: io::Error,
    },
}

/// Connects to exactly `addr` (an address already vetted or an operator override).
pub async fn dial(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, DialError> {
    match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
        Err(_) => Err(DialError::Timeout {
            addr,
            after: timeout,
        }),
        Ok(Err(source)) => Err(DialError::Connect { addr, source }),
        Ok(Ok(stream)) => {
            // Interactive traffic (SSE, small API calls) must not wait on Nagle.
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
    }
}

/// Byte counters shared between the splice and whoever writes the audit line.
#[derive(Debug, Default, Clone)]
pub struct Counters {
    up: Arc<AtomicU64>,
    down: Arc<AtomicU64>,
}

impl Counters {
    /// Bytes written upstream (box → server).
    pub fn up(&self) -> u64 {
        self.up.load(Ordering::Relaxed)
    }
    /// Bytes read from upstream (server → box).
    pub fn down(&self) -> u64 {
        self.down.load(Ordering::Relaxed)
    }
}

/// The upstream socket, counting what is written to it (up) and read from it (down).
pub struct Counted<S> {
    inner: S,
    counters: Counters,
}

impl<S> Counted<S> {
    pub fn new(inner: S, counters: Counters) -> Self {
        Counted { inner, counters }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        self.counters.down.fetch_add(n, Ordering::Relaxed);
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &res {
            self.counters.up.fetch_add(*n as u64, Ordering::Relaxed);
        }
        res
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Replays `first_bytes` (the buffered ClientHello) upstream, then copies both ways until
/// both directions have closed. Errors after a successful dial are the normal end of a
/// connection (a reset, a broken pipe) and are returned for logging only.
pub async fn splice<B, U>(
    box_side: &mut B,
    upstream: &mut Counted<U>,
    first_bytes: &[u8],
) -> io::Result<()>
where
    B: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    upstream.write_all(first_bytes).await?;
    tokio::io::copy_bidirectional_with_sizes(box_side, upstream, SPLICE_BUF, SPLICE_BUF).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn counts_both_ways() {
        let (mut box_side, mut box_peer) = tokio::io::duplex(64);
        let (up, mut up_peer) = tokio::io::duplex(64);
        let counters = Counters::default();
        let mut upstream = Counted::new(up, counters.clone());
        let task =
            tokio::spawn(async move { splice(&mut box_side, &mut upstream, b"hello").await });
        use tokio::io::AsyncReadExt;
        box_peer.write_all(b"+more").await.unwrap();
        box_peer.shutdown().await.unwrap();
        let mut got = Vec::new();
        up_peer.write_all(b"reply").await.unwrap();
        up_peer.shutdown().await.unwrap();
        up_peer.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hello+more");
        let mut back = Vec::new();
        box_peer.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"reply");
        task.await.unwrap().unwrap();
        assert_eq!((counters.up(), counters.down()), (10, 5));
    }
}
