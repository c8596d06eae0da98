//! One accepted TCP connection = one connection through the host's egress gateway. No
//! parsing here: the gateway reads the CONNECT head or the ClientHello itself, and answers
//! the CONNECT. Two ways to get it there:
//!
//! - **Handed over** (a sandbox, where berth-init is PID 1 on the host's kernel): the
//!   accepted socket itself is passed to the gateway over a fresh stream to its Unix socket
//!   (`berth_handoff::send`), and berth-init closes its descriptor at once. It copies
//!   nothing and holds nothing: the gateway reads and writes the box's socket directly. The
//!   host takes sockets only from the box's init, so a berth-init that is not PID 1 copies.
//! - **Copied** (a VM's vsock or serial channel, or not PID 1): one stream per connection,
//!   bytes copied both ways unchanged.
//!
//! Bounds, because the box controls how many connections it opens: at most `max` pairs at
//! once (over that, a new connection is closed at once), and per copied pair only the two
//! copy buffers of [`copy_bidirectional_with_sizes`]. A handed-over connection holds its
//! slot only until it has been sent; from then on the gateway's per-box cap
//! (`max_connections_per_box`) bounds it. A half-close (EOF) on one side is
//! passed on as a write shutdown of the other; an error on either side ends the pair and
//! closes both. A peer that is fully closed shows up as EOF and then as an error on the
//! next write (EPIPE, RST), so no pair outlives its peers.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::copy_bidirectional_with_sizes;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Semaphore;

use super::upstream::Upstream;
use crate::stream::Stream;

/// Copy buffer per direction: 8 KiB (tokio's default) costs a syscall pair per 8 KiB and
/// cut the box hop's throughput; 32 KiB keeps most of the gain at half the gateway's memory
/// per connection (in the box, this counts against the box's own memory limit).
const COPY_BUF: usize = 32 * 1024;

/// At most one line per kind of trouble in this interval: a box that retries in a loop must
/// not flood the console log.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// Pause after `accept` fails (other than for one aborted connection), e.g. for lack of
/// descriptors, so the loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Forwards accepted connections to the gateway ([`Upstream`]); shared by both listeners,
/// so the cap is for the box as a whole.
#[derive(Debug)]
pub struct Forwarder {
    gateway: Upstream,
    /// Whether connections are handed over rather than copied (the gateway is a Unix socket
    /// and this process is PID 1).
    hand_over: bool,
    max: usize,
    slots: Arc<Semaphore>,
    unreachable: RateLimitedLog,
    hand_over_failed: RateLimitedLog,
    over_cap: RateLimitedLog,
    accept_failed: RateLimitedLog,
}

impl Forwarder {
    /// Hands connections over when it can: the gateway is a sandbox's Unix socket and
    /// berth-init is PID 1, the only process whose sockets the host takes.
    pub fn new(gateway: Upstream, max: usize) -> Self {
        Forwarder::choosing(gateway, max, std::process::id() == 1)
    }

    fn choosing(gateway: Upstream, max: usize, pid_1: bool) -> Self {
        Forwarder {
            hand_over: pid_1 && matches!(gateway, Upstream::Unix(_)),
            gateway,
            max,
            slots: Arc::new(Semaphore::new(max)),
            unreachable: RateLimitedLog::default(),
            hand_over_failed: RateLimitedLog::default(),
            over_cap: RateLimitedLog::default(),
            accept_failed: RateLimitedLog::default(),
        }
    }

    /// Pairs being forwarded now.
    #[cfg(test)]
    fn active(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    async fn forward(&self, mut client: TcpStream) {
        // Small writes (TLS handshakes, SSE events) must not wait for Nagle. Set on the
        // socket itself, so it holds for the gateway too once handed over.
        let _ = client.set_nodelay(true);
        let gateway = match self.gateway.connect().await {
            Ok(stream) => stream,
            Err(err) => {
                // Dropping the client closes it: nothing leaves without the gateway.
                self.unreachable.note(|missed| {
                    eprintln!(
                        "berth-init: egress: cannot reach the gateway at {}: {err}; closing the connection{}",
                        self.gateway,
                        more(missed)
                    )
                });
                return;
            }
        };
        match gateway {
            Stream::Unix(gateway) if self.hand_over => {
                // Our descriptor is closed as it leaves, sent or not; unsent, that closes the
                // connection (nothing leaves without the gateway).
                if let Err(err) = hand_over(&gateway, client).await {
                    self.hand_over_failed.note(|missed| {
                        eprintln!(
                            "berth-init: egress: cannot hand the connection to the gateway at {}: {err}; closing it{}",
                            self.gateway,
                            more(missed)
                        )
                    });
                }
            }
            mut gateway => {
                // Either side's error ends both; the streams are dropped (closed) on return.
                let _ =
                    copy_bidirectional_with_sizes(&mut client, &mut gateway, COPY_BUF, COPY_BUF)
                        .await;
            }
        }
    }
}

/// Passes `client`'s socket to the gateway over `gateway` and closes this process's
/// descriptor of it: the gateway then holds the only one.
async fn hand_over(gateway: &UnixStream, client: TcpStream) -> io::Result<()> {
    let socket: OwnedFd = client.into_std()?.into();
    berth_handoff::send(gateway, socket).await
}

/// Accepts connections forever and forwards each in its own task.
pub async fn accept_loop(listener: TcpListener, fwd: Arc<Forwarder>) {
    loop {
        match listener.accept().await {
            Ok((client, _)) => {
                let Ok(slot) = fwd.slots.clone().try_acquire_owned() else {
                    drop(client);
                    fwd.over_cap.note(|missed| {
                        eprintln!(
                            "berth-init: egress: {} connections at once; closing new ones{}",
                            fwd.max,
                            more(missed)
                        )
                    });
                    continue;
                };
                let fwd = fwd.clone();
                tokio::spawn(async move {
                    fwd.forward(client).await;
                    drop(slot);
                });
            }
            Err(err) => {
                // A connection reset before it was accepted is that connection's problem.
                let passing = matches!(
                    err.kind(),
                    io::ErrorKind::ConnectionAborted | io::ErrorKind::ConnectionReset
                );
                if passing {
                    continue;
                }
                fwd.accept_failed.note(|missed| {
                    eprintln!("berth-init: egress: accept failed: {err}{}", more(missed))
                });
                tokio::time::sleep(ACCEPT_BACKOFF).await;
            }
        }
    }
}

/// The tail of a log line that stood for several events.
fn more(missed: u64) -> String {
    if missed == 0 {
        String::new()
    } else {
        format!(" ({missed} more since the last report)")
    }
}

/// Runs the logging closure at most once per [`LOG_EVERY`], passing how many events were
/// left unreported since the last line.
#[derive(Debug, Default)]
struct RateLimitedLog {
    last: Mutex<Option<Instant>>,
    missed: AtomicU64,
}

impl RateLimitedLog {
    fn note(&self, log: impl FnOnce(u64)) {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if last.is_some_and(|at| at.elapsed() < LOG_EVERY) {
            self.missed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        *last = Some(Instant::now());
        log(self.missed.swap(0, Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{UnixListener, UnixStream};

    const WAIT: Duration = Duration::from_secs(5);

    struct Setup {
        dir: tempfile::TempDir,
        addr: std::net::SocketAddr,
        fwd: Arc<Forwarder>,
    }

    impl Setup {
        /// Copies, as berth-init does when it is not PID 1 (as in these tests).
        async fn new(max: usize) -> Setup {
            Setup::choosing(max, false).await
        }

        /// Hands over, as berth-init does as a sandbox's PID 1.
        async fn handing_over(max: usize) -> Setup {
            Setup::choosing(max, true).await
        }

        async fn choosing(max: usize, pid_1: bool) -> Setup {
            let dir = tempfile::tempdir().unwrap();
            let gateway = Upstream::Unix(dir.path().join("egress.sock"));
            let fwd = Arc::new(Forwarder::choosing(gateway, max, pid_1));
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(accept_loop(listener, fwd.clone()));
            Setup { dir, addr, fwd }
        }

        fn gateway(&self) -> UnixListener {
            UnixListener::bind(self.dir.path().join("egress.sock")).unwrap()
        }

        async fn client(&self) -> TcpStream {
            TcpStream::connect(self.addr).await.unwrap()
        }

        /// Waits until exactly `n` pairs are being forwarded.
        async fn until_active(&self, n: usize) {
            let deadline = Instant::now() + WAIT;
            while self.fwd.active() != n {
                assert!(
                    Instant::now() < deadline,
                    "{} active, wanted {n}",
                    self.fwd.active()
                );
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }

    async fn accept(gateway: &UnixListener) -> UnixStream {
        tokio::time::timeout(WAIT, gateway.accept())
            .await
            .expect("the forwarder did not connect to the gateway")
            .unwrap()
            .0
    }

    /// Reads until EOF (or a reset, which is also a close), with a deadline.
    async fn read_to_close(stream: &mut (impl AsyncReadExt + Unpin)) -> Vec<u8> {
        let mut out = Vec::new();
        let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut out)).await;
        match read.expect("the connection was not closed") {
            Ok(_) => {}
            Err(err) => assert_eq!(err.kind(), io::ErrorKind::ConnectionReset),
        }
        out
    }

    #[tokio::test(flavor = "current_thread")]
    async fn bytes_flow_both_ways_and_half_close_is_passed_on() {
        let s = Setup::new(8).await;
        let gateway = s.gateway();
        let mut client = s.client().await;
        assert!(client.nodelay().is_ok());
        let mut host = accept(&gateway).await;

        client.write_all(b"hello from the box").await.unwrap();
        let mut buf = [0u8; 18];
        host.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello from the box");
        host.write_all(b"hello from the host").await.unwrap();
        let mut buf = [0u8; 19];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello from the host");

        // The box half-closes: the host sees EOF and can still answer.
        client.shutdown().await.unwrap();
        assert_eq!(read_to_close(&mut host).await, b"");
        let big = vec![7u8; 1 << 20];
        host.write_all(&big).await.unwrap();
        host.shutdown().await.unwrap();
        assert_eq!(read_to_close(&mut client).await, big);
        drop(host);
        s.until_active(0).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_connect_head_passes_through_byte_identical() {
        let s = Setup::new(8).await;
        let gateway = s.gateway();
        let mut client = s.client().await;
        let head: &[u8] = b"CONNECT API.Example.TEST.:443 HTTP/1.1\r\nHost: api.example.test:443\r\nProxy-Authorization: x\r\n\r\n\x16\x03\x01\x00\x05hello";
        client.write_all(head).await.unwrap();
        client.shutdown().await.unwrap();
        let mut host = accept(&gateway).await;
        assert_eq!(read_to_close(&mut host).await, head);
        let answer: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";
        host.write_all(answer).await.unwrap();
        drop(host);
        assert_eq!(read_to_close(&mut client).await, answer);
        s.until_active(0).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closing_peer_ends_the_pair() {
        let s = Setup::new(8).await;
        let gateway = s.gateway();

        // The host goes away: the idle box client sees the close.
        let mut client = s.client().await;
        let host = accept(&gateway).await;
        drop(host);
        assert_eq!(read_to_close(&mut client).await, b"");
        drop(client);
        s.until_active(0).await;

        // The box client goes away: the host sees the close.
        let client = s.client().await;
        let mut host = accept(&gateway).await;
        drop(client);
        assert_eq!(read_to_close(&mut host).await, b"");
        // The host keeps writing into the dead client: the error ends the pair.
        let deadline = Instant::now() + WAIT;
        while host.write_all(&[0u8; 4096]).await.is_ok() {
            assert!(Instant::now() < deadline, "the pair outlived the client");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        s.until_active(0).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn without_a_gateway_the_client_is_closed() {
        for s in [Setup::new(8).await, Setup::handing_over(8).await] {
            for _ in 0..3 {
                let mut client = s.client().await;
                let _ = client.write_all(b"CONNECT x:443 HTTP/1.1\r\n\r\n").await;
                assert_eq!(read_to_close(&mut client).await, b"");
            }
            s.until_active(0).await;
            // A socket file nobody listens on: refused, same outcome.
            drop(s.gateway());
            let mut client = s.client().await;
            assert_eq!(read_to_close(&mut client).await, b"");
            s.until_active(0).await;
        }
    }

    #[test]
    fn only_pid_1_with_a_unix_gateway_hands_over() {
        let unix = || Upstream::Unix("/run/berth/egress.sock".into());
        assert!(Forwarder::choosing(unix(), 1, true).hand_over);
        assert!(!Forwarder::choosing(unix(), 1, false).hand_over);
        assert!(!Forwarder::choosing(Upstream::vm_host(), 1, true).hand_over);
        // These tests do not run as PID 1.
        assert!(!Forwarder::new(unix(), 1).hand_over);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_handed_over_connection_is_the_gateways_alone() {
        let s = Setup::handing_over(8).await;
        let gateway = s.gateway();
        let mut client = s.client().await;
        let mut host = accept(&gateway).await;
        let first = berth_handoff::receive_first(&host, berth_handoff::Sender::ThisProcess)
            .await
            .unwrap();
        let berth_handoff::First::Socket(mut socket) = first else {
            panic!("no socket was handed over: {first:?}");
        };
        assert!(
            socket.nodelay().unwrap(),
            "TCP_NODELAY is set before the handoff"
        );
        // Nothing else on the stream, and berth-init holds no slot for the connection.
        let mut rest = Vec::new();
        assert_eq!(host.read_to_end(&mut rest).await.unwrap(), 0);
        s.until_active(0).await;

        client
            .write_all(b"\x16\x03\x01 from the box")
            .await
            .unwrap();
        let mut buf = [0u8; 16];
        socket.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"\x16\x03\x01 from the box");
        socket.write_all(b"from the gateway").await.unwrap();
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"from the gateway");
        // berth-init kept no descriptor: the gateway's close is the connection's end.
        drop(socket);
        assert_eq!(read_to_close(&mut client).await, b"");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_cap_closes_new_connections_at_once() {
        let s = Setup::new(2).await;
        let gateway = s.gateway();
        let mut held = Vec::new();
        for _ in 0..2 {
            let client = s.client().await;
            held.push((client, accept(&gateway).await));
        }
        s.until_active(2).await;

        let mut third = s.client().await;
        assert_eq!(read_to_close(&mut third).await, b"");
        assert_eq!(s.fwd.active(), 2);

        // A freed slot is usable again.
        held.pop();
        s.until_active(1).await;
        let mut fourth = s.client().await;
        let mut host = accept(&gateway).await;
        fourth.write_all(b"ok").await.unwrap();
        let mut buf = [0u8; 2];
        host.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ok");
    }

    #[test]
    fn the_log_is_rate_limited() {
        let log = RateLimitedLog::default();
        let mut lines = Vec::new();
        for _ in 0..5 {
            log.note(|missed| lines.push(missed));
        }
        assert_eq!(lines, [0]);
        *log.last.lock().unwrap() = Some(Instant::now() - LOG_EVERY);
        log.note(|missed| lines.push(missed));
        assert_eq!(lines, [0, 4]);
    }
}
