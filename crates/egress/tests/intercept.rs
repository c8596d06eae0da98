//! TLS interception end to end on loopback: a test CA plays the public CA (trusted upstream
//! through `extra_roots`), a rustls server on 127.0.0.1 plays the API (reached through
//! resolve overrides), and the box is a rustls client over the gateway's Unix socket that
//! trusts its per-box CA. No DNS, no traffic beyond loopback.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use berth_egress::gateway::{
    AuditRecord, BoxEgress, Gateway, GatewayConfig, MemorySink, StaticResolver, Verdict, Via,
};
use berth_egress::intercept::{BoxCa, CredentialRule, InterceptConfig, Interceptor};
use berth_egress::policy::Allowlist;
use berth_protocol::BoxId;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_rustls::{TlsAcceptor, TlsConnector};

const API: &str = "api.example.test";
const AUTH: &str = "auth.example.test";
const PLAIN: &str = "plain.example.test";
const KEY_PH: &str = "berth-ph-k3y7placeholder";
const KEY_SECRET: &str = "sk-real-secret-0123456789";
const AUTH_PH: &str = "berth-ph-4uthplaceholder";
const AUTH_SECRET: &str = "Bearer gh-real-secret-abcdef";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

// ---- the "public" CA and the upstream --------------------------------------------------

struct TestCa {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    fn new() -> TestCa {
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

    fn server_config(&self, hosts: &[&str]) -> ServerConfig {
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
struct Upstream {
    addr: std::net::SocketAddr,
    heads: mpsc::UnboundedReceiver<String>,
    /// Per request: its body (by its framing), then whatever arrived after it.
    bodies: mpsc::UnboundedReceiver<(Vec<u8>, Vec<u8>)>,
    release: mpsc::UnboundedSender<()>,
    task: JoinHandle<()>,
}

impl Upstream {
    async fn start(ca: &TestCa) -> Upstream {
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
async fn echo<S: AsyncWrite + Unpin>(
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
fn odd_pieces(bytes: &[u8]) -> Vec<&[u8]> {
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

async fn send<S: AsyncWrite + Unpin>(s: &mut S, bytes: &[u8]) {
    let _ = s.write_all(bytes).await;
    let _ = s.flush().await;
}

/// A chunked body decoded the way the box's HTTP client would (trailers dropped).
fn dechunk(mut body: &[u8]) -> Vec<u8> {
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
fn decode_response(back: &[u8]) -> (String, Vec<u8>) {
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
async fn read_body<S: AsyncRead + Unpin>(s: &mut S, head: &str) -> Vec<u8> {
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
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> Option<String> {
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

fn rules() -> Vec<CredentialRule> {
    vec![
        CredentialRule::new("anthropic", &[API], "x-api-key", KEY_PH, KEY_SECRET).unwrap(),
        CredentialRule::new("github", &[AUTH], "authorization", AUTH_PH, AUTH_SECRET).unwrap(),
    ]
}

// ---- the gateway and the box -----------------------------------------------------------

struct Harness {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    sink: Arc<MemorySink>,
    box_ca: CertificateDer<'static>,
    public_ca: CertificateDer<'static>,
    upstream: Upstream,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<()>>,
}

impl Harness {
    async fn start() -> Harness {
        Harness::start_with(rules()).await
    }

    async fn start_with(rules: Vec<CredentialRule>) -> Harness {
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
    async fn tls(&self, host: &str, connect: bool) -> tokio_rustls::client::TlsStream<UnixStream> {
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
    async fn request(&self, host: &str, request: &str) -> String {
        let mut tls = self.tls(host, false).await;
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut back = Vec::new();
        // A gateway that closes without close_notify would be an error here.
        tls.read_to_end(&mut back).await.unwrap();
        String::from_utf8(back).unwrap()
    }

    async fn audit(&self, n: usize) -> Vec<AuditRecord> {
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

    async fn shutdown(mut self) {
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

fn get(host: &str, extra: &str) -> String {
    format!("GET /v1/messages HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n")
}

// ---- tests -------------------------------------------------------------------------------

#[tokio::test]
async fn the_placeholder_becomes_the_real_secret_upstream() {
    let mut h = Harness::start().await;
    let mut tls = h.tls(API, false).await;
    // The box offered h2 and http/1.1; the gateway speaks only the latter.
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    tls.write_all(get(API, &format!("X-Api-Key: {KEY_PH}\r\n")).as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    tls.read_to_end(&mut raw).await.unwrap();
    let (back, body) = decode_response(&raw);
    assert!(back.starts_with("HTTP/1.1 200 OK\r\n"), "{back}");
    assert_eq!(body, b"ok", "{back}");
    assert!(back.contains("connection: close\r\n"), "{back}");
    assert!(!back.contains("keep-alive"), "{back}");

    let head = h.upstream.heads.recv().await.unwrap();
    assert!(
        head.contains(&format!("x-api-key: {KEY_SECRET}\r\n")),
        "{head}"
    );
    assert!(!head.contains(KEY_PH), "{head}");
    assert!(head.contains("connection: close\r\n"), "{head}");

    let records = h.audit(1).await;
    let r = &records[0];
    assert_eq!(r.decision, Verdict::Allow);
    assert!(r.intercept);
    assert_eq!(r.credential.as_deref(), Some("anthropic"));
    assert_eq!(r.target.as_deref(), Some(API));
    assert!(r.bytes_up > 0 && r.bytes_down > 0, "{r:?}");
    let line = serde_json::to_string(r).unwrap();
    assert!(line.contains("\"intercept\":true"), "{line}");
    h.shutdown().await;
}

#[tokio::test]
async fn bearer_placeholder_in_authorization_and_through_connect() {
    let mut h = Harness::start().await;
    let mut tls = h.tls(AUTH, true).await;
    tls.write_all(get(AUTH, &format!("authorization: Bearer {AUTH_PH}\r\n")).as_bytes())
        .await
        .unwrap();
    let mut back = String::new();
    tls.read_to_string(&mut back).await.unwrap();
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    let head = h.upstream.heads.recv().await.unwrap();
    assert!(
        head.contains(&format!("authorization: {AUTH_SECRET}\r\n")),
        "{head}"
    );
    assert!(!head.contains(AUTH_PH), "{head}");
    let r = &h.audit(1).await[0];
    assert_eq!(r.via, Some(Via::Connect));
    assert_eq!(r.credential.as_deref(), Some("github"));
    h.shutdown().await;
}

#[tokio::test]
async fn client_credentials_are_stripped() {
    let mut h = Harness::start().await;
    let extra = "Authorization: Bearer box-made-this\r\nCOOKIE: session=box\r\nProxy-Authorization: Basic eA==\r\nx-api-key: not-the-placeholder\r\nX-Other: kept\r\n";
    let back = h.request(API, &get(API, extra)).await;
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    let head = h.upstream.heads.recv().await.unwrap();
    let lower = head.to_ascii_lowercase();
    for gone in [
        "authorization",
        "cookie",
        "x-api-key",
        "box-made-this",
        KEY_SECRET,
    ] {
        assert!(
            !lower.contains(&gone.to_ascii_lowercase()),
            "{gone} in {head}"
        );
    }
    assert!(head.contains("X-Other: kept\r\n"), "{head}");
    let r = &h.audit(1).await[0];
    assert_eq!(
        (r.decision, r.intercept, r.credential.as_deref()),
        (Verdict::Allow, true, None)
    );
    h.shutdown().await;
}

#[tokio::test]
async fn placeholder_to_a_host_without_the_rule_reaches_it_unchanged() {
    let mut h = Harness::start().await;
    let back = h
        .request(PLAIN, &get(PLAIN, &format!("x-api-key: {KEY_PH}\r\n")))
        .await;
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    // Passthrough: the upstream's own keep-alive header comes back untouched.
    assert!(back.contains("connection: keep-alive"), "{back}");
    let head = h.upstream.heads.recv().await.unwrap();
    assert!(head.contains(&format!("x-api-key: {KEY_PH}\r\n")), "{head}");
    assert!(!head.contains(KEY_SECRET), "{head}");
    let r = &h.audit(1).await[0];
    assert_eq!((r.decision, r.intercept), (Verdict::Allow, false));
    h.shutdown().await;
}

#[tokio::test]
async fn trace_is_refused_and_never_reaches_upstream() {
    let mut h = Harness::start().await;
    for method in ["TRACE", "TRACK"] {
        let req = format!("{method} / HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\n\r\n");
        let back = h.request(API, &req).await;
        assert!(back.starts_with("HTTP/1.1 405 "), "{back}");
    }
    let records = h.audit(2).await;
    for r in &records {
        assert_eq!(r.decision, Verdict::Deny);
        assert_eq!(r.reason.as_deref(), Some("method_refused"));
        assert!(r.intercept);
    }
    // Every refused request is audited only after the gateway is done with it; nothing
    // was ever sent upstream.
    assert!(h.upstream.heads.try_recv().is_err());
    h.shutdown().await;
}

#[tokio::test]
async fn host_other_than_sni_gets_421() {
    let mut h = Harness::start().await;
    let back = h
        .request(API, &get(PLAIN, &format!("x-api-key: {KEY_PH}\r\n")))
        .await;
    assert!(back.starts_with("HTTP/1.1 421 "), "{back}");
    let r = &h.audit(1).await[0];
    assert_eq!(r.decision, Verdict::Deny);
    assert_eq!(r.reason.as_deref(), Some("host_mismatch"));
    assert!(h.upstream.heads.try_recv().is_err());
    h.shutdown().await;
}

#[tokio::test]
async fn sse_events_arrive_as_they_are_sent() {
    let h = Harness::start().await;
    let mut tls = h.tls(API, false).await;
    tls.write_all(
        format!("GET /sse HTTP/1.1\r\nHost: {API}\r\nAccept: text/event-stream\r\nx-api-key: {KEY_PH}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    // The upstream holds the second event until released: the first must arrive alone.
    let mut got = first_event(&mut tls).await;
    let text = String::from_utf8(got.clone()).unwrap();
    assert!(text.contains("content-type: text/event-stream"), "{text}");
    assert!(!text.contains("two"));
    h.upstream.release.send(()).unwrap();
    tls.read_to_end(&mut got).await.unwrap();
    let (_, body) = decode_response(&got);
    assert_eq!(
        body,
        b"event: ping\ndata: one\n\nevent: ping\ndata: two\n\n"
    );
    let r = &h.audit(1).await[0];
    assert_eq!((r.decision, r.intercept), (Verdict::Allow, true));
    h.shutdown().await;
}

#[tokio::test]
async fn upstream_certificate_must_chain_to_a_trusted_root() {
    // A gateway whose interceptor does not trust the test CA refuses the upstream.
    let public = TestCa::new();
    let mut upstream = Upstream::start(&public).await;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let sink = Arc::new(MemorySink::new());
    let gateway = Gateway::new(
        GatewayConfig {
            resolve_overrides: [(API.to_string(), upstream.addr)].into_iter().collect(),
            ..GatewayConfig::default()
        },
        Arc::new(StaticResolver {
            answers: HashMap::new(),
        }),
        sink.clone(),
    )
    .unwrap();
    let box_id = BoxId::from_random([6; 20]);
    let ca = BoxCa::new(&box_id).unwrap();
    let box_ca = ca.cert_der();
    let rules =
        vec![CredentialRule::new("anthropic", &[API], "x-api-key", KEY_PH, KEY_SECRET).unwrap()];
    let interceptor = Arc::new(Interceptor::new(ca, InterceptConfig::new(rules)).unwrap());
    let egress = BoxEgress {
        box_id,
        allow: Allowlist::new(&[API.to_string()]).unwrap(),
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(async move {
        gateway
            .serve_box_intercepting(listener, egress, interceptor, async {
                let _ = stopped.await;
            })
            .await
    });
    let s = UnixStream::connect(&socket).await.unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(box_ca).unwrap();
    let config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(API).unwrap(), s)
        .await
        .unwrap();
    tls.write_all(get(API, &format!("x-api-key: {KEY_PH}\r\n")).as_bytes())
        .await
        .unwrap();
    let mut back = String::new();
    tls.read_to_string(&mut back).await.unwrap();
    assert!(back.starts_with("HTTP/1.1 502 "), "{back}");
    let records = sink.wait_for(1).await;
    assert_eq!(records[0].reason.as_deref(), Some("upstream_tls"));
    assert!(upstream.heads.try_recv().is_err());
    let _ = stop.send(());
    served.await.unwrap();
}

#[tokio::test]
async fn exactly_one_body_goes_up_and_a_pipelined_request_does_not() {
    let mut h = Harness::start().await;
    let smuggled = format!("TRACE / HTTP/1.1\r\nHost: {API}\r\n\r\n");
    let req = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\nContent-Length: 11\r\n\r\nhello world{smuggled}"
    );
    let back = h.request(API, &req).await;
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    let head = h.upstream.heads.recv().await.unwrap();
    assert!(head.contains(KEY_SECRET), "{head}");
    let (body, rest) = h.upstream.bodies.recv().await.unwrap();
    assert_eq!(body, b"hello world");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));

    let chunked = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {API}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n{smuggled}"
    );
    let back = h.request(API, &chunked).await;
    assert!(back.starts_with("HTTP/1.1 200 OK"), "{back}");
    let _ = h.upstream.heads.recv().await.unwrap();
    let (body, rest) = h.upstream.bodies.recv().await.unwrap();
    assert_eq!(body, b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));

    let ambiguous = format!(
        "POST / HTTP/1.1\r\nHost: {API}\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n"
    );
    let back = h.request(API, &ambiguous).await;
    assert!(back.starts_with("HTTP/1.1 400 "), "{back}");
    let records = h.audit(3).await;
    assert_eq!(records[2].reason.as_deref(), Some("bad_request"));
    h.shutdown().await;
}

// ---- laundering: the real secret never comes back to the box -----------------------------

/// Sends `request` and returns the raw response bytes.
async fn exchange(h: &Harness, host: &str, request: &str) -> Vec<u8> {
    let mut tls = h.tls(host, false).await;
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut back = Vec::new();
    tls.read_to_end(&mut back).await.unwrap();
    back
}

/// Reads until the first event (`data: one`) has arrived, while the upstream holds the
/// second. A gateway that buffered the response would never deliver it: the wait is
/// bounded so that shows up as a failure, not a hang.
async fn first_event<S: AsyncRead + Unpin>(tls: &mut S) -> Vec<u8> {
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

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn an_echoing_upstream_hands_the_box_only_the_placeholder() {
    let mut h = Harness::start().await;
    for kind in ["-chunked", "-length", "-close"] {
        for (host, header, ph, secret, token) in [
            (API, "x-api-key", KEY_PH, KEY_SECRET, KEY_SECRET),
            (
                AUTH,
                "authorization",
                AUTH_PH,
                AUTH_SECRET,
                "gh-real-secret-abcdef",
            ),
        ] {
            let value = if header == "authorization" {
                format!("Bearer {ph}")
            } else {
                ph.to_owned()
            };
            let req =
                format!("GET /echo{kind} HTTP/1.1\r\nHost: {host}\r\n{header}: {value}\r\n\r\n");
            let back = exchange(&h, host, &req).await;
            let sent = h.upstream.heads.recv().await.unwrap();
            assert!(sent.contains(secret), "the secret went up: {sent}");
            let (head, body) = decode_response(&back);
            assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
            for (what, bytes) in [
                ("head", head.as_bytes()),
                ("body", body.as_slice()),
                ("raw", back.as_slice()),
            ] {
                assert!(
                    !contains(bytes, token),
                    "{kind} {host}: the secret reached the box in the {what}: {}",
                    String::from_utf8_lossy(bytes)
                );
            }
            assert!(contains(head.as_bytes(), ph), "{head}");
            assert!(contains(&body, ph), "{}", String::from_utf8_lossy(&body));
            assert!(
                body.starts_with(b"GET /echo"),
                "the rest of the body is intact: {}",
                String::from_utf8_lossy(&body)
            );
            assert!(
                sent.to_ascii_lowercase()
                    .contains("accept-encoding: identity\r\n"),
                "upstream is asked for an unencoded response: {sent}"
            );
        }
    }
    h.shutdown().await;
}

#[tokio::test]
async fn an_echoed_secret_in_an_event_stream_is_replaced_and_events_still_stream() {
    let mut h = Harness::start().await;
    let mut tls = h.tls(API, false).await;
    tls.write_all(
        format!("GET /echo-sse HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut got = first_event(&mut tls).await;
    assert!(
        !contains(&got, KEY_SECRET),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(contains(&got, KEY_PH), "{}", String::from_utf8_lossy(&got));
    h.upstream.release.send(()).unwrap();
    tls.read_to_end(&mut got).await.unwrap();
    let (_, body) = decode_response(&got);
    assert!(body.ends_with(b"data: one\n\nevent: ping\ndata: two\n\n"));
    assert!(!contains(&body, KEY_SECRET));
    let _ = h.upstream.heads.recv().await;
    h.shutdown().await;
}

#[tokio::test]
async fn an_encoded_response_that_could_hide_the_secret_is_refused() {
    let mut h = Harness::start().await;
    let req = format!("GET /echo-gzip HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\nAccept-Encoding: gzip, br\r\n\r\n");
    let back = exchange(&h, API, &req).await;
    let text = String::from_utf8_lossy(&back);
    assert!(text.starts_with("HTTP/1.1 502 "), "{text}");
    assert!(!contains(&back, KEY_SECRET), "{text}");
    let sent = h.upstream.heads.recv().await.unwrap();
    assert!(
        !sent.to_ascii_lowercase().contains("accept-encoding: gzip"),
        "{sent}"
    );
    let r = &h.audit(1).await[0];
    assert_eq!(r.decision, Verdict::Deny);
    assert_eq!(r.reason.as_deref(), Some("encoded_response"));
    h.shutdown().await;
}

// ---- a rule's methods and paths ----------------------------------------------------------

#[tokio::test]
async fn the_secret_goes_only_to_the_rules_methods_and_paths() {
    let restricted = CredentialRule::new("anthropic", &[API], "x-api-key", KEY_PH, KEY_SECRET)
        .unwrap()
        .restricted(&["POST"], &["/v1/messages"])
        .unwrap();
    let mut h = Harness::start_with(vec![restricted]).await;
    // (method and target, whether the secret goes up, the audit's reason if withheld)
    let cases = [
        ("POST /v1/messages", true, None),
        ("POST /v1/messages/batches?beta=true", true, None),
        ("POST /v1/mess%61ges", true, None),
        ("GET /v1/messages", false, Some("method")),
        ("post /v1/messages", false, Some("method")),
        ("POST /v1/messagesX", false, Some("path")),
        ("POST /v1/models?p=/v1/messages", false, Some("path")),
        ("POST /v1/messages/../admin", false, Some("path_ambiguous")),
        (
            "POST /v1/messages/%2e%2e/admin",
            false,
            Some("path_ambiguous"),
        ),
        (
            "POST /v1/messages/%2E%2E%2Fadmin",
            false,
            Some("path_ambiguous"),
        ),
        ("POST /v1/messages//admin", false, Some("path_ambiguous")),
        (
            "POST /v1/messages;x=/../../admin",
            false,
            Some("path_ambiguous"),
        ),
    ];
    for (n, (request_line, injected, reason)) in cases.iter().enumerate() {
        let req = format!(
            "{request_line} HTTP/1.1\r\nHost: {API}\r\nx-api-key: {KEY_PH}\r\nContent-Length: 0\r\n\r\n"
        );
        let back = exchange(&h, API, &req).await;
        assert!(back.starts_with(b"HTTP/1.1 200 OK"), "{request_line}");
        let head = h.upstream.heads.recv().await.unwrap();
        assert_eq!(
            head.contains(KEY_SECRET),
            *injected,
            "{request_line}: {head}"
        );
        if !injected {
            assert!(
                head.contains(&format!("x-api-key: {KEY_PH}\r\n")),
                "{request_line}: the placeholder goes on unchanged: {head}"
            );
        }
        let r = &h.audit(n + 1).await[n];
        assert_eq!(r.decision, Verdict::Allow, "{request_line}");
        assert_eq!(
            r.credential.as_deref(),
            injected.then_some("anthropic"),
            "{request_line}"
        );
        assert_eq!(
            r.withheld.as_ref().map(|w| (w.rule.as_str(), w.reason)),
            reason.map(|why| ("anthropic", why)),
            "{request_line}"
        );
    }
    h.shutdown().await;
}
