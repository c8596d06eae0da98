//! The fixtures of `tests/intercept.rs`.

use berth_egress::gateway::{
    AuditRecord, BoxEgress, Gateway, GatewayConfig, MemorySink, StaticResolver,
};
use berth_egress::intercept::{BoxCa, CredentialRule, InterceptConfig, Interceptor};
use berth_egress::policy::Allowlist;
use berth_protocol::BoxId;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};

pub(crate) const API: &str = "api.example.test";
pub(crate) const AUTH: &str = "auth.example.test";
pub(crate) const PLAIN: &str = "plain.example.test";
pub(crate) const KEY_PH: &str = "berth-ph-k3y7placeholder";
pub(crate) const KEY_SECRET: &str = "sk-real-secret-0123456789";
pub(crate) const AUTH_PH: &str = "berth-ph-4uthplaceholder";
pub(crate) const AUTH_SECRET: &str = "Bearer gh-real-secret-abcdef";

pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---- the "public" CA and the upstream --------------------------------------------------

pub(crate) struct TestCa {
    pub(crate) ca: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    pub(crate) fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "test public CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        TestCa {
            ca: CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    pub(crate) fn server_config(&self, hosts: &[&str]) -> ServerConfig {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &*self.ca).unwrap();
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .unwrap();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        config
    }
}

/// A TLS server for all three hosts. Per connection it reads one request head, reports it,
/// and answers `ok`; on `/sse` it sends one event, waits for the test to release it, sends
/// a second and closes.
pub(crate) struct Upstream {
    pub(crate) addr: std::net::SocketAddr,
    pub(crate) heads: mpsc::UnboundedReceiver<String>,
    /// Per request: its body (by its framing), then whatever arrived after it.
    pub(crate) bodies: mpsc::UnboundedReceiver<(Vec<u8>, Vec<u8>)>,
    pub(crate) release: mpsc::UnboundedSender<()>,
    pub(crate) task: JoinHandle<()>,
}

impl Upstream {
    pub(crate) async fn start(ca: &TestCa) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = TlsAcceptor::from(Arc::new(ca.server_config(&[API, AUTH, PLAIN])));
        let (heads_tx, heads) = mpsc::unbounded_channel();
        let (bodies_tx, bodies) = mpsc::unbounded_channel();
        let (release, release_rx) = mpsc::unbounded_channel::<()>();
        let release_rx = Arc::new(tokio::sync::Mutex::new(release_rx));
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let heads_tx = heads_tx.clone();
                let bodies_tx = bodies_tx.clone();
                let release_rx = release_rx.clone();
                conns.spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let Some(head) = read_head(&mut tls).await else {
                        return;
                    };
                    let _ = heads_tx.send(head.clone());
                    let body = read_body(&mut tls, &head).await;
                    if let Some(kind) = head
                        .strip_prefix("GET /echo")
                        .and_then(|rest| rest.split_once(' '))
                        .map(|(kind, _)| kind.to_owned())
                    {
                        echo(&mut tls, &head, &kind, &release_rx).await;
                        if kind == "-close" {
                            // As many HTTP/1.0 servers do: TCP closed, no TLS close_notify.
                            let _ = tls.get_mut().0.shutdown().await;
                        }
                    } else if head.starts_with("GET /sse ") {
                        let _ = tls
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\nevent: ping\ndata: one\n\n")
                            .await;
                        let _ = tls.flush().await;
                        let _ = release_rx.lock().await.recv().await;
                        let _ = tls.write_all(b"event: ping\ndata: two\n\n").await;
                    } else {
                        let _ = tls
                            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nok")
                            .await;
                    }
                    let _ = tls.shutdown().await;
                    // Whatever the gateway sends after the body, until it closes.
                    let mut rest = Vec::new();
                    let mut b = [0u8; 256];
                    while let Ok(n @ 1..) = tls.read(&mut b).await {
                        rest.extend_from_slice(&b[..n]);
                    }
                    let _ = bodies_tx.send((body, rest));
                });
            }
        });
        Upstream {
            addr,
            heads,
            bodies,
            release,
            task,
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An upstream that launders: every request header comes back as a response header
/// (`x-echo-N: name: value`) and the whole request head comes back as the body, written in
/// small pieces (each its own TLS record) at odd offsets so any secret in it is split
/// across reads. `kind`: `-chunked` (chunk framing also split), `-length`
/// (Content-Length), `-close` (HTTP/1.0, ended by the close), `-sse` (an event stream that holds its second event until released),
/// `-gzip` (labelled gzip although the gateway asked for identity).
pub(crate) async fn echo<S: AsyncWrite + Unpin>(
    tls: &mut S,
    head: &str,
    kind: &str,
    release: &tokio::sync::Mutex<mpsc::UnboundedReceiver<()>>,
) {
    let mut resp = String::from("HTTP/1.1 200 OK\r\n");
    for (i, line) in head.lines().skip(1).filter(|l| !l.is_empty()).enumerate() {
        resp += &format!("x-echo-{i}: {line}\r\n");
    }
    let body = head.as_bytes();
    let pieces = odd_pieces(body);
    match kind {
        "-chunked" => {
            resp += "transfer-encoding: chunked\r\n\r\n";
            send(tls, resp.as_bytes()).await;
            for piece in pieces {
                send(tls, format!("{:x}\r\n", piece.len()).as_bytes()).await;
                send(tls, piece).await;
                send(tls, b"\r\n").await;
            }
            send(tls, b"0\r\n\r\n").await;
        }
        "-length" | "-gzip" => {
            if kind == "-gzip" {
                resp += "content-encoding: gzip\r\n";
            }
            resp += &format!("content-length: {}\r\n\r\n", body.len());
            send(tls, resp.as_bytes()).await;
            for piece in pieces {
                send(tls, piece).await;
            }
        }
        "-close" => {
            // An HTTP/1.0 server: no length, the body ends when the connection does.
            let resp = resp.replacen("HTTP/1.1", "HTTP/1.0", 1) + "\r\n";
            send(tls, resp.as_bytes()).await;
            for piece in pieces {
                send(tls, piece).await;
            }
        }
        "-sse" => {
            resp += "content-type: text/event-stream\r\n\r\n";
            send(tls, resp.as_bytes()).await;
            for piece in pieces {
                send(tls, piece).await;
            }
            send(tls, b"\n\nevent: ping\ndata: one\n\n").await;
            let _ = release.lock().await.recv().await;
            send(tls, b"event: ping\ndata: two\n\n").await;
        }
        other => panic!("unknown echo kind {other:?}"),
    }
}

/// `bytes` cut at 1, 4, 9, 16, … (growing odd steps: 1, 3, 5, 7, …).
pub(crate) fn odd_pieces(bytes: &[u8]) -> Vec<&[u8]> {
    let mut pieces = Vec::new();
    let (mut at, mut step) = (0, 1);
    while at < bytes.len() {
        let end = (at + step).min(bytes.len());
        pieces.push(&bytes[at..end]);
        at = end;
        step = if step >= 13 { 1 } else { step + 2 };
    }
    pieces
}

pub(crate) async fn send<S: AsyncWrite + Unpin>(s: &mut S, bytes: &[u8]) {
    let _ = s.write_all(bytes).await;
    let _ = s.flush().await;
}

/// A chunked body decoded the way the box's HTTP client would (trailers dropped).
pub(crate) fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = body.windows(2).position(|w| w == b"\r\n") else {
            panic!("unterminated chunk: {}", String::from_utf8_lossy(body));
        };
        let size = std::str::from_utf8(&body[..eol]).unwrap();
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        body = &body[eol + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        assert_eq!(&body[size..size + 2], b"\r\n");
        body = &body[size + 2..];
    }
}

/// A response split into its head and its body as the box's client would decode it.
pub(crate) fn decode_response(back: &[u8]) -> (String, Vec<u8>) {
    let end = back
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete head")
        + 4;
    let head = String::from_utf8(back[..end].to_vec()).unwrap();
    let lower = head.to_ascii_lowercase();
    let body = if lower.contains("transfer-encoding: chunked\r\n") {
        dechunk(&back[end..])
    } else {
        back[end..].to_vec()
    };
    (head, body)
}

/// The body after `head`: Content-Length bytes, or chunked up to the last chunk (kept
/// encoded).
pub(crate) async fn read_body<S: AsyncRead + Unpin>(s: &mut S, head: &str) -> Vec<u8> {
    let lower = head.to_ascii_lowercase();
    let mut body = Vec::new();
    let mut b = [0u8; 1];
    if let Some(n) = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .and_then(|n| n.trim().parse::<usize>().ok())
    {
        body.resize(n, 0);
        let _ = s.read_exact(&mut body).await;
    } else if lower.contains("transfer-encoding: chunked") {
        while !body.ends_with(b"\r\n0\r\n\r\n") && !body.starts_with(b"0\r\n\r\n") {
            match s.read(&mut b).await {
                Ok(1) => body.push(b[0]),
                _ => break,
            }
        }
    }
    body
}

/// Reads up to the end of a head, byte by byte so nothing after it is consumed.
pub(crate) async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Option<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.ok()? == 0 {
            return None;
        }
        head.push(b[0]);
    }
    String::from_utf8(head).ok()
}

pub(crate) fn rules() -> Vec<CredentialRule> {
    vec![
        CredentialRule::new("anthropic", &[API], "x-api-key", KEY_PH, KEY_SECRET).unwrap(),
        CredentialRule::new("github", &[AUTH], "authorization", AUTH_PH, AUTH_SECRET).unwrap(),
    ]
}

// ---- the gateway and the box -----------------------------------------------------------

pub(crate) struct Harness {
    pub(crate) _dir: tempfile::TempDir,
    pub(crate) socket: PathBuf,
    pub(crate) sink: Arc<MemorySink>,
    pub(crate) box_ca: CertificateDer<'static>,
    pub(crate) public_ca: CertificateDer<'static>,
    pub(crate) upstream: Upstream,
    pub(crate) stop: Option<oneshot::Sender<()>>,
    pub(crate) served: Option<JoinHandle<()>>,
}

impl Harness {
    pub(crate) async fn start() -> Harness {
        Harness::start_with(rules()).await
    }

    pub(crate) async fn start_with(rules: Vec<CredentialRule>) -> Harness {
        let public = TestCa::new();
        let upstream = Upstream::start(&public).await;
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("egress.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let sink = Arc::new(MemorySink::new());
        let overrides = [API, AUTH, PLAIN]
            .iter()
            .map(|h| (h.to_string(), upstream.addr))
            .collect();
        let gateway = Gateway::new(
            GatewayConfig {
                resolve_overrides: overrides,
                ..GatewayConfig::default()
            },
            Arc::new(StaticResolver {
                answers: HashMap::new(),
            }),
            sink.clone(),
        )
        .unwrap();
        let box_id = BoxId::from_random([5; 20]);
        let ca = BoxCa::new(&box_id).unwrap();
        let box_ca = ca.cert_der();
        let mut config = InterceptConfig::new(rules);
        config.extra_roots = vec![public.ca.der().clone()];
        let interceptor = Arc::new(Interceptor::new(ca, config).unwrap());
        let egress = BoxEgress {
            box_id,
            allow: Allowlist::new(&[API.to_string(), AUTH.to_string(), PLAIN.to_string()]).unwrap(),
        };
        let (stop, stopped) = oneshot::channel();
        let served = tokio::spawn(async move {
            gateway
                .serve_box_intercepting(listener, egress, interceptor, async {
                    let _ = stopped.await;
                })
                .await
        });
        Harness {
            _dir: dir,
            socket,
            sink,
            box_ca,
            public_ca: public.ca.der().clone(),
            upstream,
            stop: Some(stop),
            served: Some(served),
        }
    }

    /// The box's TLS client: it trusts its own CA (as its trust store would) and, for the
    /// passthrough host, the test "public" CA. It offers h2 first, as modern clients do.
    pub(crate) async fn tls(
        &self,
        host: &str,
        connect: bool,
    ) -> tokio_rustls::client::TlsStream<UnixStream> {
        let mut s = UnixStream::connect(&self.socket).await.unwrap();
        if connect {
            s.write_all(
                format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let head = read_head(&mut s).await.unwrap();
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        }
        let mut roots = RootCertStore::empty();
        roots.add(self.box_ca.clone()).unwrap();
        roots.add(self.public_ca.clone()).unwrap();
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let name = ServerName::try_from(host.to_string()).unwrap();
        TlsConnector::from(Arc::new(config))
            .connect(name, s)
            .await
            .unwrap()
    }

    /// Sends one request and reads the response to the end.
    pub(crate) async fn request(&self, host: &str, request: &str) -> String {
        let mut tls = self.tls(host, false).await;
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut back = Vec::new();
        // A gateway that closes without close_notify would be an error here.
        tls.read_to_end(&mut back).await.unwrap();
        String::from_utf8(back).unwrap()
    }

    pub(crate) async fn audit(&self, n: usize) -> Vec<AuditRecord> {
        let records = self.sink.wait_for(n).await;
        for r in &records {
            let line = serde_json::to_string(r).unwrap();
            assert!(
                !line.contains(KEY_SECRET) && !line.contains("gh-real"),
                "{line}"
            );
            assert!(!line.contains("sk-real"), "{line}");
        }
        records
    }

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

pub(crate) fn get(host: &str, extra: &str) -> String {
    format!("GET /v1/messages HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n")
}

/// Sends `request` and returns the raw response bytes.
pub(crate) async fn exchange(h: &Harness, host: &str, request: &str) -> Vec<u8> {
    let mut tls = h.tls(host, false).await;
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut back = Vec::new();
    tls.read_to_end(&mut back).await.unwrap();
    back
}

/// Reads until the first event (`data: one`) has arrived, while the upstream holds the
/// second. A gateway that buffered the response would never deliver it: the wait is
/// bounded so that shows up as a failure, not a hang.
pub(crate) async fn first_event<S: AsyncRead + Unpin>(tls: &mut S) -> Vec<u8> {
    let mut got = Vec::new();
    let mut chunk = [0u8; 1024];
    let first = async {
        while !contains(&got, "data: one\n\n") {
            let n = tls.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "stream ended early: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), first)
        .await
        .expect("the first event did not arrive while upstream held the second");
    got
}

pub(crate) fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}
