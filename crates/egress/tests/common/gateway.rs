//! The fixtures of `tests/gateway.rs`.

use berth_egress::gateway::{
    AuditRecord, AuditSink, BoxEgress, Gateway, GatewayConfig, HandoffSender, MemorySink,
    StaticResolver, Timeouts, Verdict, Via, DEFAULT_MAX_CONNECTIONS_PER_BOX,
};
use berth_egress::policy::Allowlist;
use berth_protocol::BoxId;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

pub(crate) const API: &str = "api.example.test";

// ---- ClientHello builder -------------------------------------------------------------

#[derive(Default)]
pub(crate) struct Hello {
    pub(crate) sni: Vec<String>,
    pub(crate) ech: bool,
}

impl Hello {
    pub(crate) fn sni(name: &str) -> Self {
        Hello {
            sni: vec![name.into()],
            ech: false,
        }
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut exts = Vec::new();
        for name in &self.sni {
            let mut list = vec![0u8];
            push_u16(&mut list, name.len());
            list.extend_from_slice(name.as_bytes());
            let mut data = Vec::new();
            push_u16(&mut data, list.len());
            data.extend(list);
            push_ext(&mut exts, 0x0000, &data);
        }
        // supported_versions: TLS 1.3, so the upstream would see a realistic hello.
        push_ext(&mut exts, 0x002b, &[2, 0x03, 0x04]);
        if self.ech {
            push_ext(&mut exts, 0xfe0d, &[0, 0, 1, 0, 1, 7, 0, 0, 0, 0]);
        }
        let mut body = vec![0x03, 0x03];
        body.extend([0x42u8; 32]); // random
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // cipher suites
        body.extend([1, 0]); // compression: null
        push_u16(&mut body, exts.len());
        body.extend(exts);
        let mut hs = vec![0x01];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut rec = vec![0x16, 0x03, 0x01];
        push_u16(&mut rec, hs.len());
        rec.extend(hs);
        rec
    }
}

pub(crate) fn push_u16(v: &mut Vec<u8>, n: usize) {
    v.extend(u16::try_from(n).unwrap().to_be_bytes());
}

pub(crate) fn push_ext(v: &mut Vec<u8>, ty: u16, data: &[u8]) {
    v.extend(ty.to_be_bytes());
    push_u16(v, data.len());
    v.extend_from_slice(data);
}

// ---- upstream --------------------------------------------------------------------------

/// A loopback TCP "server": per connection, reads `hello_len` bytes, answers `pong`, then
/// reads to EOF and reports everything it received.
pub(crate) struct Upstream {
    pub(crate) addr: SocketAddr,
    pub(crate) accepted: Arc<AtomicUsize>,
    pub(crate) received: mpsc::UnboundedReceiver<Vec<u8>>,
    pub(crate) task: JoinHandle<()>,
}

impl Upstream {
    pub(crate) async fn start(hello_len: usize) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let (tx, received) = mpsc::unbounded_channel();
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let tx = tx.clone();
                tokio::spawn(async move {
                    let mut got = vec![0u8; hello_len];
                    if s.read_exact(&mut got).await.is_err() {
                        return;
                    }
                    let _ = s.write_all(b"pong").await;
                    let _ = s.read_to_end(&mut got).await;
                    let _ = s.shutdown().await;
                    let _ = tx.send(got);
                });
            }
        });
        Upstream {
            addr,
            accepted,
            received,
            task,
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

// ---- gateway harness ---------------------------------------------------------------------

pub(crate) struct Harness {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) socket: PathBuf,
    pub(crate) sink: Arc<MemorySink>,
    pub(crate) stop: Option<oneshot::Sender<()>>,
    pub(crate) served: Option<JoinHandle<()>>,
    pub(crate) box_id: BoxId,
}

pub(crate) struct Setup {
    pub(crate) allow: Vec<&'static str>,
    pub(crate) overrides: HashMap<String, SocketAddr>,
    pub(crate) answers: HashMap<String, Vec<IpAddr>>,
    pub(crate) timeouts: Timeouts,
    pub(crate) max_connections: usize,
    pub(crate) sink: Option<Arc<dyn AuditSink>>,
    /// Whose sockets the gateway takes: the box's init, as in production, unless a test
    /// plays berth-init itself.
    pub(crate) handoff_from: HandoffSender,
}

impl Setup {
    pub(crate) fn new(upstream: Option<&Upstream>) -> Setup {
        let mut overrides = HashMap::new();
        if let Some(u) = upstream {
            overrides.insert(API.to_string(), u.addr);
        }
        Setup {
            allow: vec![API, "*.wild.test", "*.bad.test"],
            overrides,
            answers: HashMap::new(),
            timeouts: Timeouts::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS_PER_BOX,
            sink: None,
            handoff_from: HandoffSender::BoxInit,
        }
    }

    pub(crate) fn start(self) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("egress.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let mem = Arc::new(MemorySink::new());
        let sink: Arc<dyn AuditSink> = self.sink.unwrap_or_else(|| mem.clone());
        let gateway = Gateway::new(
            GatewayConfig {
                resolve_overrides: self.overrides,
                timeouts: self.timeouts,
                max_connections_per_box: self.max_connections,
                handoff_from: self.handoff_from,
            },
            Arc::new(StaticResolver {
                answers: self.answers,
            }),
            sink,
        )
        .unwrap();
        let box_id = BoxId::from_random([3; 20]);
        let allow: Vec<String> = self.allow.iter().map(|s| s.to_string()).collect();
        let egress = BoxEgress {
            box_id: box_id.clone(),
            allow: Allowlist::new(&allow).unwrap(),
        };
        let (stop, stopped) = oneshot::channel();
        let served = tokio::spawn(async move {
            gateway
                .serve_box(listener, egress, async {
                    let _ = stopped.await;
                })
                .await
        });
        Harness {
            _dir: dir,
            socket,
            sink: mem,
            stop: Some(stop),
            served: Some(served),
            box_id,
        }
    }
}

impl Harness {
    pub(crate) async fn connect(&self) -> UnixStream {
        UnixStream::connect(&self.socket).await.unwrap()
    }

    /// Does what berth-init does with a connection it accepted in a sandbox: hands the
    /// socket to the gateway and keeps no copy. Returns the client's end (the box's program).
    pub(crate) async fn hand_over(&self) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (client, accepted) = tokio::join!(
            TcpStream::connect(listener.local_addr().unwrap()),
            listener.accept()
        );
        let socket: std::os::fd::OwnedFd = accepted.unwrap().0.into_std().unwrap().into();
        let unix = self.connect().await;
        berth_handoff::send(&unix, socket).await.unwrap();
        client.unwrap()
    }

    /// Stops serving and waits until the gateway has returned (every connection closed).
    pub(crate) async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(served) = self.served.take() {
            served.await.unwrap();
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(served) = &self.served {
            served.abort();
        }
    }
}

pub(crate) async fn connect_head<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    target: &str,
) -> String {
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    read_head(s).await
}

/// Reads a response head byte by byte so nothing after it is consumed.
pub(crate) async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap() == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

/// Sends `hello` + `ping`, half-closes, and returns what came back.
pub(crate) async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    hello: &[u8],
) -> Vec<u8> {
    s.write_all(hello).await.unwrap();
    s.write_all(b"ping").await.unwrap();
    s.shutdown().await.unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).await.unwrap();
    back
}

/// Half-closes the box side (so an upstream that was wrongly reached answers and closes
/// instead of waiting) and asserts the gateway sends nothing more and closes.
pub(crate) async fn expect_closed<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    let _ = s.shutdown().await;
    expect_closed_without_eof(s).await;
}

/// As [`expect_closed`] but without half-closing: the gateway must close on its own.
pub(crate) async fn expect_closed_without_eof<S: AsyncRead + Unpin>(s: &mut S) {
    let mut rest = Vec::new();
    // A reset is as good as EOF here: either way nothing came back. The bound turns a
    // gateway that wrongly keeps the stream open into a failure instead of a hang.
    let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "gateway kept the stream open");
    assert!(rest.is_empty(), "gateway sent {rest:?}");
}

pub(crate) fn assert_allow(r: &AuditRecord, via: Via, up: &Upstream, bytes_up: u64) {
    assert_eq!(r.decision, Verdict::Allow, "{r:?}");
    assert_eq!(r.reason, None);
    assert_eq!(r.target.as_deref(), Some(API));
    assert_eq!(r.port, Some(443));
    assert_eq!(r.via, Some(via));
    assert_eq!(r.resolved, Some(up.addr));
    assert_eq!((r.bytes_up, r.bytes_down), (bytes_up, 4));
}

pub(crate) fn assert_deny(r: &AuditRecord, reason: &str) {
    assert_eq!(r.decision, Verdict::Deny, "{r:?}");
    assert_eq!(r.reason.as_deref(), Some(reason), "{r:?}");
    assert_eq!((r.bytes_up, r.bytes_down), (0, 0));
}
