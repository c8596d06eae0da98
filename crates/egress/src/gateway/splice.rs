//! Dialling the vetted address and splicing bytes both ways, counted as they pass so that
//! the audit line has the totals even when the connection is cut by a shutdown.

use std::any::Any;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::zero_copy;

/// Copy buffer per direction for streams other than the gateway's own sockets (those take
/// `zero_copy`). tokio's default 8 KiB costs a syscall pair per 8 KiB, so the gateway burned
/// as much CPU as the TLS endpoints and halved loopback throughput (docs/benchmarks.md).
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

    /// Completes once no byte has passed either way for `limit` (checked eight times per
    /// `limit`, so a relay ends between `limit` and `limit` × 9/8 after its last byte).
    pub async fn idle_for(&self, limit: Duration) {
        let tick = (limit / 8).max(Duration::from_millis(10));
        let mut seen = (self.up(), self.down());
        let mut since = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(tick).await;
            let now = (self.up(), self.down());
            if now != seen {
                seen = now;
                since = tokio::time::Instant::now();
            } else if since.elapsed() >= limit {
                return;
            }
        }
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
/// both directions have closed (an EOF is passed on as a write shutdown) or either fails,
/// which ends both. Bytes are counted in `upstream`'s counters as they pass. Errors after a
/// successful dial are the normal end of a connection (a reset, a broken pipe) and are
/// returned for logging only. Dropping the future (a shutdown) cuts the connection.
pub async fn splice<B, U>(
    box_side: &mut B,
    upstream: &mut Counted<U>,
    first_bytes: &[u8],
) -> io::Result<()>
where
    B: AsyncRead + AsyncWrite + Unpin + 'static,
    U: AsyncRead + AsyncWrite + Unpin + 'static,
{
    // The gateway's own sockets (a box side handed over by berth-init or a stream, a TCP
    // upstream) take the zero-copy path; anything else (tests' in-memory pipes, a TLS
    // stream) is copied through buffers.
    let b = &*box_side as &dyn Any;
    if let Some(u) = (&upstream.inner as &dyn Any).downcast_ref::<TcpStream>() {
        let c = &upstream.counters;
        if let Some(b) = b.downcast_ref::<TcpStream>() {
            return zero_copy::splice(b, u, first_bytes, &c.up, &c.down).await;
        }
        if let Some(b) = b.downcast_ref::<UnixStream>() {
            return zero_copy::splice(b, u, first_bytes, &c.up, &c.down).await;
        }
    }
    upstream.write_all(first_bytes).await?;
    tokio::io::copy_bidirectional_with_sizes(box_side, upstream, SPLICE_BUF, SPLICE_BUF).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::zero_copy::{pump, Mode};
    use super::*;
    use berth_testkit::pattern;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    #[tokio::test]
    async fn counts_both_ways() {
        let (mut box_side, mut box_peer) = tokio::io::duplex(64);
        let (up, mut up_peer) = tokio::io::duplex(64);
        let counters = Counters::default();
        let mut upstream = Counted::new(up, counters.clone());
        let task =
            tokio::spawn(async move { splice(&mut box_side, &mut upstream, b"hello").await });
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

    /// The gateway's real sockets: the box side (a stream's Unix socket, or the box's own
    /// TCP socket handed over by berth-init) and a TCP connection upstream (loopback).
    struct Sockets<B> {
        box_side: B,
        box_peer: B,
        upstream: TcpStream,
        up_peer: TcpStream,
    }

    async fn tcp_pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (connected, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (connected.unwrap(), accepted.unwrap().0)
    }

    async fn around<B>((box_side, box_peer): (B, B)) -> Sockets<B> {
        let (upstream, up_peer) = tcp_pair().await;
        Sockets {
            box_side,
            box_peer,
            upstream,
            up_peer,
        }
    }

    async fn sockets() -> Sockets<UnixStream> {
        around(UnixStream::pair().unwrap()).await
    }

    async fn handed_sockets() -> Sockets<TcpStream> {
        around(tcp_pair().await).await
    }

    /// Writes `send` and shuts down, while reading to EOF; returns what was read.
    async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(s: S, send: Vec<u8>) -> Vec<u8> {
        let (mut r, mut w) = tokio::io::split(s);
        let writer = async move {
            w.write_all(&send).await.unwrap();
            w.shutdown().await.unwrap();
            w
        };
        let reader = async move {
            let mut got = Vec::new();
            r.read_to_end(&mut got).await.unwrap();
            got
        };
        tokio::join!(writer, reader).1
    }

    async fn large_transfers_both_ways_exactly<B>(sockets: Sockets<B>)
    where
        B: AsyncRead + AsyncWrite + Unpin + 'static,
    {
        let Sockets {
            mut box_side,
            box_peer,
            upstream,
            up_peer,
        } = sockets;
        let counters = Counters::default();
        let mut upstream = Counted::new(upstream, counters.clone());
        let hello = b"client hello".to_vec();
        let up_bytes = pattern::bytes(24 << 20, 1);
        let down_bytes = pattern::bytes(40 << 20, 2);
        let mut want_up = hello.clone();
        want_up.extend_from_slice(&up_bytes);
        let spliced = async { splice(&mut box_side, &mut upstream, &hello).await };
        let (res, at_upstream, at_box) = tokio::join!(
            spliced,
            exchange(up_peer, down_bytes.clone()),
            exchange(box_peer, up_bytes),
        );
        res.unwrap();
        assert_eq!(at_upstream.len(), want_up.len());
        assert_eq!(pattern::fnv1a(&at_upstream), pattern::fnv1a(&want_up));
        assert_eq!(at_box.len(), down_bytes.len());
        assert_eq!(pattern::fnv1a(&at_box), pattern::fnv1a(&down_bytes));
        assert_eq!(counters.up(), want_up.len() as u64);
        assert_eq!(counters.down(), down_bytes.len() as u64);
    }

    #[tokio::test]
    async fn sockets_move_large_transfers_both_ways_exactly() {
        large_transfers_both_ways_exactly(sockets().await).await;
    }

    #[tokio::test]
    async fn a_handed_socket_moves_large_transfers_both_ways_exactly() {
        large_transfers_both_ways_exactly(handed_sockets().await).await;
    }

    async fn half_close_passed_on_and_the_other_way_open<B>(sockets: Sockets<B>)
    where
        B: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Sockets {
            mut box_side,
            mut box_peer,
            upstream,
            mut up_peer,
        } = sockets;
        let counters = Counters::default();
        let mut upstream = Counted::new(upstream, counters.clone());
        let task = tokio::spawn(async move {
            let res = splice(&mut box_side, &mut upstream, b"hi").await;
            (res, box_side, upstream)
        });
        box_peer.write_all(b" there").await.unwrap();
        box_peer.shutdown().await.unwrap();
        // The upstream sees the box's EOF…
        let mut got = Vec::new();
        up_peer.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"hi there");
        // …counted before the connection ends…
        assert_eq!(counters.up(), 8);
        // …and can still answer.
        up_peer.write_all(b"answer").await.unwrap();
        up_peer.shutdown().await.unwrap();
        let mut back = Vec::new();
        box_peer.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"answer");
        let (res, _, _) = task.await.unwrap();
        res.unwrap();
        assert_eq!((counters.up(), counters.down()), (8, 6));
    }

    #[tokio::test]
    async fn sockets_pass_half_close_on_and_keep_the_other_way_open() {
        half_close_passed_on_and_the_other_way_open(sockets().await).await;
        half_close_passed_on_and_the_other_way_open(handed_sockets().await).await;
    }

    #[tokio::test]
    async fn sockets_end_both_ways_on_an_upstream_reset() {
        let Sockets {
            mut box_side,
            mut box_peer,
            upstream,
            up_peer,
        } = sockets().await;
        let counters = Counters::default();
        let mut upstream = Counted::new(upstream, counters.clone());
        let task = tokio::spawn(async move {
            let res = splice(&mut box_side, &mut upstream, b"hi").await;
            drop((box_side, upstream));
            res
        });
        let mut up_peer = up_peer;
        let mut first = [0u8; 2];
        up_peer.read_exact(&mut first).await.unwrap();
        up_peer.set_zero_linger().unwrap();
        // A reset; the box → upstream direction is idle, and the reset must end it too.
        drop(up_peer);
        let res = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("splice did not end on a reset")
            .unwrap();
        assert!(res.is_err(), "{res:?}");
        let mut rest = Vec::new();
        assert_eq!(box_peer.read_to_end(&mut rest).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn each_mode_moves_bytes_counts_and_passes_eof() {
        for mode in [Mode::Copy, Mode::Splice] {
            let Sockets {
                box_side,
                box_peer,
                upstream,
                up_peer,
            } = sockets().await;
            let (read, written) = (AtomicU64::new(0), AtomicU64::new(0));
            let bytes = pattern::bytes(3 << 20, 3);
            let up = pump(&box_side, &upstream, mode, Some(&read), Some(&written));
            let down = pump(&upstream, &box_side, mode, None, None);
            let (a, b, at_upstream, at_box) = tokio::join!(
                up,
                down,
                exchange(up_peer, Vec::new()),
                exchange(box_peer, bytes.clone()),
            );
            a.unwrap();
            b.unwrap();
            assert!(at_box.is_empty());
            assert_eq!(
                pattern::fnv1a(&at_upstream),
                pattern::fnv1a(&bytes),
                "{mode:?}"
            );
            let n = bytes.len() as u64;
            assert_eq!(
                (read.into_inner(), written.into_inner()),
                (n, n),
                "{mode:?}"
            );
        }
    }
}
