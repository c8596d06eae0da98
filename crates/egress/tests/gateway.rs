//! The gateway end to end on loopback: a Unix socket stands in for the box's egress channel,
//! a plain TCP server on 127.0.0.1 for the upstream (reached through a resolve override), and
//! ClientHellos are built byte by byte. No DNS, no traffic beyond loopback.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use berth_egress::gateway::{
    AuditRecord, AuditSink, BoxEgress, Gateway, GatewayConfig, GatewayError, JsonlDirSink,
    MemorySink, StaticResolver, Timeouts, Verdict, Via, DEFAULT_MAX_CONNECTIONS_PER_BOX,
};
use berth_egress::policy::Allowlist;
use berth_protocol::BoxId;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

const API: &str = "api.example.test";

// ---- ClientHello builder -------------------------------------------------------------

#[derive(Default)]
struct Hello {
    sni: Vec<String>,
    ech: bool,
}

impl Hello {
    fn sni(name: &str) -> Self {
        Hello {
            sni: vec![name.into()],
            ech: false,
        }
    }

    fn bytes(&self) -> Vec<u8> {
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

fn push_u16(v: &mut Vec<u8>, n: usize) {
    v.extend(u16::try_from(n).unwrap().to_be_bytes());
}

fn push_ext(v: &mut Vec<u8>, ty: u16, data: &[u8]) {
    v.extend(ty.to_be_bytes());
    push_u16(v, data.len());
    v.extend_from_slice(data);
}

// ---- upstream --------------------------------------------------------------------------

/// A loopback TCP "server": per connection, reads `hello_len` bytes, answers `pong`, then
/// reads to EOF and reports everything it received.
struct Upstream {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    received: mpsc::UnboundedReceiver<Vec<u8>>,
    task: JoinHandle<()>,
}

impl Upstream {
    async fn start(hello_len: usize) -> Upstream {
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

struct Harness {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    sink: Arc<MemorySink>,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<()>>,
    box_id: BoxId,
}

struct Setup {
    allow: Vec<&'static str>,
    overrides: HashMap<String, SocketAddr>,
    answers: HashMap<String, Vec<IpAddr>>,
    timeouts: Timeouts,
    max_connections: usize,
    sink: Option<Arc<dyn AuditSink>>,
}

impl Setup {
    fn new(upstream: Option<&Upstream>) -> Setup {
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
        }
    }

    fn start(self) -> Harness {
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
    async fn connect(&self) -> UnixStream {
        UnixStream::connect(&self.socket).await.unwrap()
    }

    /// Stops serving and waits until the gateway has returned (every connection closed).
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

async fn connect_head(s: &mut UnixStream, target: &str) -> String {
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    read_head(s).await
}

/// Reads a response head byte by byte so nothing after it is consumed.
async fn read_head(s: &mut UnixStream) -> String {
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
async fn exchange(s: &mut UnixStream, hello: &[u8]) -> Vec<u8> {
    s.write_all(hello).await.unwrap();
    s.write_all(b"ping").await.unwrap();
    s.shutdown().await.unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).await.unwrap();
    back
}

/// Half-closes the box side (so an upstream that was wrongly reached answers and closes
/// instead of waiting) and asserts the gateway sends nothing more and closes.
async fn expect_closed(s: &mut UnixStream) {
    let _ = s.shutdown().await;
    expect_closed_without_eof(s).await;
}

/// As [`expect_closed`] but without half-closing: the gateway must close on its own.
async fn expect_closed_without_eof(s: &mut UnixStream) {
    let mut rest = Vec::new();
    // A reset is as good as EOF here: either way nothing came back. The bound turns a
    // gateway that wrongly keeps the stream open into a failure instead of a hang.
    let read = tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "gateway kept the stream open");
    assert!(rest.is_empty(), "gateway sent {rest:?}");
}

fn assert_allow(r: &AuditRecord, via: Via, up: &Upstream, bytes_up: u64) {
    assert_eq!(r.decision, Verdict::Allow, "{r:?}");
    assert_eq!(r.reason, None);
    assert_eq!(r.target.as_deref(), Some(API));
    assert_eq!(r.port, Some(443));
    assert_eq!(r.via, Some(via));
    assert_eq!(r.resolved, Some(up.addr));
    assert_eq!((r.bytes_up, r.bytes_down), (bytes_up, 4));
}

fn assert_deny(r: &AuditRecord, reason: &str) {
    assert_eq!(r.decision, Verdict::Deny, "{r:?}");
    assert_eq!(r.reason.as_deref(), Some(reason), "{r:?}");
    assert_eq!((r.bytes_up, r.bytes_down), (0, 0));
}

// ---- allowed ---------------------------------------------------------------------------

#[tokio::test]
async fn direct_allowed_host_flows_both_ways() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();
    let mut s = h.connect().await;
    assert_eq!(exchange(&mut s, &hello).await, b"pong");
    let mut expected = hello.clone();
    expected.extend(b"ping");
    assert_eq!(up.received.recv().await.unwrap(), expected);
    let records = h.sink.wait_for(1).await;
    assert_eq!(records[0].box_id, h.box_id);
    assert_allow(&records[0], Via::Direct, &up, expected.len() as u64);
    h.shutdown().await;
}

#[tokio::test]
async fn connect_allowed_host_flows_both_ways() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "api.example.test:443").await;
    assert_eq!(head, "HTTP/1.1 200 Connection Established\r\n\r\n");
    assert_eq!(exchange(&mut s, &hello).await, b"pong");
    let mut expected = hello.clone();
    expected.extend(b"ping");
    assert_eq!(up.received.recv().await.unwrap(), expected);
    let records = h.sink.wait_for(1).await;
    assert_allow(&records[0], Via::Connect, &up, expected.len() as u64);
    h.shutdown().await;
}

#[tokio::test]
async fn hello_in_one_byte_writes_works() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();
    for via_connect in [false, true] {
        let mut s = h.connect().await;
        if via_connect {
            let head = connect_head(&mut s, "api.example.test:443").await;
            assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        }
        for b in &hello {
            s.write_all(std::slice::from_ref(b)).await.unwrap();
            s.flush().await.unwrap();
        }
        s.write_all(b"ping").await.unwrap();
        s.shutdown().await.unwrap();
        let mut back = Vec::new();
        s.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"pong");
        let got = up.received.recv().await.unwrap();
        assert_eq!(&got[..hello.len()], &hello[..]);
    }
    let records = h.sink.wait_for(2).await;
    assert!(
        records.iter().all(|r| r.decision == Verdict::Allow),
        "{records:?}"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn trailing_dot_and_upper_case_are_the_canonical_name() {
    let spellings = ["API.Example.TEST.", "api.example.test.", "Api.Example.Test"];
    let hellos: Vec<Vec<u8>> = spellings.iter().map(|n| Hello::sni(n).bytes()).collect();
    // The upstream answers after `hello_len` bytes, and spellings differ in length, so each
    // spelling gets its own upstream and gateway.
    for (spelling, hello) in spellings.iter().zip(&hellos) {
        let mut up = Upstream::start(hello.len()).await;
        let h = Setup::new(Some(&up)).start();
        // Direct: the SNI spelling is canonicalised before the policy and the override.
        let mut s = h.connect().await;
        assert_eq!(exchange(&mut s, hello).await, b"pong", "{spelling}");
        assert_eq!(
            &up.received.recv().await.unwrap()[..hello.len()],
            &hello[..]
        );
        // CONNECT with this spelling, ClientHello with another one: still the same name.
        let mut s = h.connect().await;
        let head = connect_head(&mut s, &format!("{spelling}:443")).await;
        assert!(head.starts_with("HTTP/1.1 200 "), "{spelling}: {head}");
        assert_eq!(exchange(&mut s, &hellos[0]).await, b"pong", "{spelling}");
        let records = h.sink.wait_for(2).await;
        for r in &records {
            assert_eq!(r.decision, Verdict::Allow, "{r:?}");
            assert_eq!(r.target.as_deref(), Some(API));
        }
        h.shutdown().await;
    }
}

// ---- refused -----------------------------------------------------------------------------

#[tokio::test]
async fn not_allowed_host_is_refused_and_logged() {
    let up = Upstream::start(1).await;
    let h = Setup::new(Some(&up)).start();
    let mut s = h.connect().await;
    s.write_all(&Hello::sni("evil.example.test").bytes())
        .await
        .unwrap();
    expect_closed(&mut s).await;
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "evil.example.test:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    expect_closed(&mut s).await;
    let records = h.sink.wait_for(2).await;
    for (r, via) in records.iter().zip([Via::Direct, Via::Connect]) {
        assert_deny(r, "not_allowed");
        assert_eq!(r.target.as_deref(), Some("evil.example.test"));
        assert_eq!(r.via, Some(via));
        assert_eq!(r.resolved, None);
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn connect_to_other_ports_is_refused() {
    let up = Upstream::start(1).await;
    let h = Setup::new(Some(&up)).start();
    for port in [80u16, 22, 8443] {
        let mut s = h.connect().await;
        let head = connect_head(&mut s, &format!("{API}:{port}")).await;
        assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
        expect_closed(&mut s).await;
    }
    let records = h.sink.wait_for(3).await;
    for (r, port) in records.iter().zip([80u16, 22, 8443]) {
        assert_deny(r, "port");
        assert_eq!(r.port, Some(port));
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn sni_different_from_connect_host_is_refused() {
    let up = Upstream::start(1).await;
    let mut setup = Setup::new(Some(&up));
    // The SNI names another allowed host that also resolves fine: the mismatch alone refuses.
    // (The override key is spelled oddly on purpose: the gateway canonicalises it.)
    setup.overrides.insert("B.Wild.Test.".into(), up.addr);
    let h = setup.start();
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "api.example.test:443").await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    s.write_all(&Hello::sni("b.wild.test").bytes())
        .await
        .unwrap();
    expect_closed(&mut s).await;
    let records = h.sink.wait_for(1).await;
    assert_deny(&records[0], "sni_mismatch");
    assert_eq!(records[0].target.as_deref(), Some(API));
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn names_resolving_to_forbidden_addresses_are_refused() {
    let cases: [(&str, &str); 5] = [
        ("lo.bad.test", "127.0.0.1"),
        ("ten.bad.test", "10.0.0.1"),
        ("meta.bad.test", "169.254.169.254"),
        ("mapped.bad.test", "::ffff:127.0.0.1"),
        ("ula.bad.test", "fd00:ec2::254"),
    ];
    let mut setup = Setup::new(None);
    for (name, ip) in cases {
        setup.answers.insert(name.into(), vec![ip.parse().unwrap()]);
    }
    let h = setup.start();
    for (i, (name, _)) in cases.iter().enumerate() {
        let mut s = h.connect().await;
        if i % 2 == 0 {
            s.write_all(&Hello::sni(name).bytes()).await.unwrap();
        } else {
            let head = connect_head(&mut s, &format!("{name}:443")).await;
            assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
        }
        expect_closed(&mut s).await;
    }
    let records = h.sink.wait_for(cases.len()).await;
    for (r, (name, ip)) in records.iter().zip(cases) {
        let reason = r.reason.as_deref().unwrap_or("");
        assert!(reason.starts_with("forbidden_address:"), "{name}: {r:?}");
        assert_eq!(r.decision, Verdict::Deny);
        assert_eq!(r.target.as_deref(), Some(name));
        assert_eq!(r.resolved, None);
        assert_eq!(r.refused.len(), 1);
        assert_eq!(r.refused[0].addr, ip.parse::<IpAddr>().unwrap());
    }
    h.shutdown().await;
}

#[tokio::test]
async fn unresolvable_name_is_refused() {
    let h = Setup::new(None).start();
    let mut s = h.connect().await;
    s.write_all(&Hello::sni("nowhere.wild.test").bytes())
        .await
        .unwrap();
    expect_closed(&mut s).await;
    assert_deny(&h.sink.wait_for(1).await[0], "resolve_failed");
    h.shutdown().await;
}

#[tokio::test]
async fn ip_literals_are_refused() {
    let h = Setup::new(None).start();
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "10.0.0.1:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "[::1]:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    let mut s = h.connect().await;
    s.write_all(&Hello::sni("127.0.0.1").bytes()).await.unwrap();
    expect_closed(&mut s).await;
    let records = h.sink.wait_for(3).await;
    for r in &records {
        assert_deny(r, "ip_literal");
    }
    h.shutdown().await;
}

#[tokio::test]
async fn no_sni_ech_and_garbage_are_refused() {
    let up = Upstream::start(1).await;
    let h = Setup::new(Some(&up)).start();
    let no_sni = Hello::default().bytes();
    let ech = Hello {
        sni: vec![API.into()],
        ech: true,
    }
    .bytes();
    let duplicate = Hello {
        sni: vec![API.into(), API.into()],
        ech: false,
    }
    .bytes();
    let mut bad_record = Hello::sni(API).bytes();
    bad_record[5] = 0x02; // a ServerHello, not a ClientHello
    let cases: Vec<(&[u8], &str)> = vec![
        (&no_sni, "no_sni"),
        (&ech, "ech"),
        (&duplicate, "bad_client_hello"),
        (&bad_record, "bad_client_hello"),
        (
            b"GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n",
            "bad_client_hello",
        ),
        (b"\x00\x01\x02\x03garbage", "bad_client_hello"),
        (b"\x16\x03\x01\xff\xffgarbage", "bad_client_hello"),
        (b"CONNECT api.example.test HTTP/1.1\r\n\r\n", "bad_connect"),
    ];
    for (bytes, _) in &cases {
        let mut s = h.connect().await;
        s.write_all(bytes).await.unwrap();
        // Half-close so a hello the gateway would keep reading ends cleanly.
        s.shutdown().await.unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest).await;
        assert!(!rest.starts_with(b"HTTP/1.1 200"), "{rest:?}");
    }
    let records = h.sink.wait_for(cases.len()).await;
    let mut got: Vec<String> = records.iter().filter_map(|r| r.reason.clone()).collect();
    let mut want: Vec<String> = cases.iter().map(|(_, r)| r.to_string()).collect();
    // Connections are handled concurrently, so compare as multisets.
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

#[tokio::test]
async fn silent_box_times_out() {
    let mut setup = Setup::new(None);
    setup.timeouts.client_hello = Duration::from_millis(200);
    let h = setup.start();
    let mut s = h.connect().await;
    s.write_all(&Hello::sni(API).bytes()[..10]).await.unwrap();
    // No half-close: the gateway must give up on its own.
    expect_closed_without_eof(&mut s).await;
    assert_deny(&h.sink.wait_for(1).await[0], "timeout");
    h.shutdown().await;
}

#[tokio::test]
async fn dial_failure_is_refused() {
    // A port that was just free: nothing listens there.
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut setup = Setup::new(None);
    setup.overrides.insert(API.into(), addr);
    let h = setup.start();
    let mut s = h.connect().await;
    s.write_all(&Hello::sni(API).bytes()).await.unwrap();
    expect_closed(&mut s).await;
    let r = &h.sink.wait_for(1).await[0];
    assert_deny(r, "dial_failed");
    assert_eq!(r.resolved, Some(addr));
    h.shutdown().await;
}

#[test]
fn invalid_override_name_is_a_config_error() {
    let overrides = HashMap::from([("not a host".to_string(), "127.0.0.1:1".parse().unwrap())]);
    let err = Gateway::new(
        GatewayConfig {
            resolve_overrides: overrides,
            ..GatewayConfig::default()
        },
        Arc::new(StaticResolver::default()),
        Arc::new(MemorySink::new()),
    )
    .err()
    .unwrap();
    assert!(matches!(err, GatewayError::BadOverride { .. }), "{err}");
}

// ---- audit file and shutdown -------------------------------------------------------------

#[tokio::test]
async fn audit_file_has_one_line_per_decision_with_all_fields() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let audit_dir = tempfile::tempdir().unwrap();
    let file_sink = Arc::new(JsonlDirSink::new(audit_dir.path()).unwrap());
    let mut setup = Setup::new(Some(&up));
    setup.sink = Some(file_sink.clone());
    let h = setup.start();

    let mut s = h.connect().await;
    assert_eq!(exchange(&mut s, &hello).await, b"pong");
    up.received.recv().await.unwrap();
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "evil.example.test:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    expect_closed(&mut s).await;
    let box_id = h.box_id.clone();
    // Every line is written before the gateway returns from shutdown.
    h.shutdown().await;

    // The writer thread has every line once `sync` returns.
    file_sink.sync();
    let (lines, next) = file_sink.read_page(&box_id, 0, 100).unwrap();
    assert_eq!((lines.len(), next), (2, 2), "{lines:?}");
    for line in &lines {
        for field in [
            "box",
            "time",
            "target",
            "port",
            "via",
            "resolved",
            "decision",
            "reason",
            "bytes_up",
            "bytes_down",
            "duration_ms",
        ] {
            assert!(line.get(field).is_some(), "{field} missing in {line}");
        }
        assert_eq!(line["box"], box_id.as_str());
        let time = line["time"].as_str().unwrap();
        time::OffsetDateTime::parse(time, &time::format_description::well_known::Rfc3339).unwrap();
    }
    let allow = lines.iter().find(|l| l["decision"] == "allow").unwrap();
    assert_eq!(allow["via"], "direct");
    assert_eq!(allow["target"], API);
    assert_eq!(allow["resolved"], up.addr.to_string());
    assert_eq!(allow["bytes_up"], (hello.len() + 4) as u64);
    assert_eq!(allow["bytes_down"], 4);
    assert!(allow["reason"].is_null());
    let deny = lines.iter().find(|l| l["decision"] == "deny").unwrap();
    assert_eq!(deny["via"], "connect");
    assert_eq!(deny["reason"], "not_allowed");
    assert!(deny["resolved"].is_null());
}

#[tokio::test]
async fn shutdown_cuts_open_connections_and_still_audits_them() {
    let hello = Hello::sni(API).bytes();
    let up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();
    let mut s = h.connect().await;
    s.write_all(&hello).await.unwrap();
    let mut pong = [0u8; 4];
    s.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"pong");
    // The connection is spliced and idle in both directions; shutdown must end it.
    let sink = h.sink.clone();
    let socket = h.socket.clone();
    tokio::time::timeout(Duration::from_secs(20), h.shutdown())
        .await
        .expect("shutdown waits for open connections forever");
    expect_closed_without_eof(&mut s).await;
    let records = sink.wait_for(1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].decision, Verdict::Allow);
    assert_eq!(
        (records[0].bytes_up, records[0].bytes_down),
        (hello.len() as u64, 4)
    );
    // The listener is gone with the gateway.
    assert!(UnixStream::connect(&socket).await.is_err());
}

// ---- real TLS ----------------------------------------------------------------------------

mod tls {
    use super::*;
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    fn provider() -> Arc<rustls::crypto::CryptoProvider> {
        Arc::new(rustls::crypto::ring::default_provider())
    }

    /// A test CA and a server certificate for `api.example.test` signed by it.
    struct Pki {
        ca_der: rustls::pki_types::CertificateDer<'static>,
        server: Arc<rustls::ServerConfig>,
    }

    fn pki() -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "berth test CA");
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
        let leaf_key = rcgen::KeyPair::generate().unwrap();
        let leaf = rcgen::CertificateParams::new(vec![API.to_string()])
            .unwrap()
            .signed_by(&leaf_key, &*ca)
            .unwrap();
        let server = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der())),
            )
            .unwrap();
        Pki {
            ca_der: ca.der().clone(),
            server: Arc::new(server),
        }
    }

    /// A TLS server on loopback: per connection, completes the handshake, reports the SNI
    /// it saw, reads `hello gateway\n` and answers `hello box\n`.
    async fn tls_upstream(
        config: Arc<rustls::ServerConfig>,
    ) -> (
        SocketAddr,
        mpsc::UnboundedReceiver<Option<String>>,
        JoinHandle<()>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let acceptor = TlsAcceptor::from(config);
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let sni = tls.get_ref().1.server_name().map(str::to_owned);
                    let mut line = [0u8; 14];
                    if tls.read_exact(&mut line).await.is_err() || &line != b"hello gateway\n" {
                        return;
                    }
                    let _ = tls.write_all(b"hello box\n").await;
                    let _ = tls.shutdown().await;
                    let _ = tx.send(sni);
                });
            }
        });
        (addr, rx, task)
    }

    fn connector(ca: &rustls::pki_types::CertificateDer<'static>) -> TlsConnector {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        TlsConnector::from(Arc::new(config))
    }

    #[tokio::test]
    async fn rustls_client_completes_a_handshake_through_the_gateway() {
        let pki = pki();
        let (addr, mut seen, upstream) = tls_upstream(pki.server.clone()).await;
        let mut setup = Setup::new(None);
        setup.overrides.insert(API.into(), addr);
        let h = setup.start();
        let connector = connector(&pki.ca_der);
        for via_connect in [false, true] {
            let mut s = h.connect().await;
            if via_connect {
                let head = connect_head(&mut s, "api.example.test:443").await;
                assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
            }
            let name = ServerName::try_from(API).unwrap();
            let mut tls = connector.connect(name, s).await.unwrap();
            tls.write_all(b"hello gateway\n").await.unwrap();
            let mut reply = Vec::new();
            tls.read_to_end(&mut reply).await.unwrap();
            assert_eq!(reply, b"hello box\n");
            assert_eq!(seen.recv().await.unwrap().as_deref(), Some(API));
            drop(tls);
        }
        let records = h.sink.wait_for(2).await;
        for (r, via) in records.iter().zip([Via::Direct, Via::Connect]) {
            assert_eq!(r.decision, Verdict::Allow, "{r:?}");
            assert_eq!(r.via, Some(via));
            assert_eq!(r.resolved, Some(addr));
            // A TLS 1.3 handshake carries a ClientHello up and a certificate chain down.
            assert!(r.bytes_up > 200 && r.bytes_down > 300, "{r:?}");
        }
        h.shutdown().await;
        upstream.abort();
    }

    #[tokio::test]
    async fn rustls_client_to_a_name_off_the_allowlist_is_refused() {
        let pki = pki();
        let (addr, _seen, upstream) = tls_upstream(pki.server.clone()).await;
        let mut setup = Setup::new(None);
        setup.overrides.insert(API.into(), addr);
        setup.allow = vec!["other.example.test"];
        let h = setup.start();
        let s = h.connect().await;
        let name = ServerName::try_from(API).unwrap();
        assert!(connector(&pki.ca_der).connect(name, s).await.is_err());
        assert_deny(&h.sink.wait_for(1).await[0], "not_allowed");
        h.shutdown().await;
        upstream.abort();
    }
}

// ---- per-box resources ---------------------------------------------------------------------

/// Opens a spliced connection and waits for the upstream's `pong`; it stays open.
async fn open_relay(h: &Harness, hello: &[u8]) -> UnixStream {
    let mut s = h.connect().await;
    s.write_all(hello).await.unwrap();
    let mut pong = [0u8; 4];
    s.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"pong");
    s
}

#[tokio::test]
async fn a_box_over_its_connection_cap_is_refused_at_once() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let mut setup = Setup::new(Some(&up));
    setup.max_connections = 3;
    let h = setup.start();
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(open_relay(&h, &hello).await);
    }
    // The fourth is closed without a byte and without reaching upstream.
    let mut over = h.connect().await;
    let _ = over.write_all(&hello).await;
    expect_closed_without_eof(&mut over).await;
    let r = &h.sink.wait_for(1).await[0];
    assert_deny(r, "too_many_connections");
    assert_eq!(up.accepted.load(Ordering::SeqCst), 3);
    // One ends: there is room again.
    let mut first = open.remove(0);
    first.shutdown().await.unwrap();
    let mut rest = Vec::new();
    first.read_to_end(&mut rest).await.unwrap();
    up.received.recv().await.unwrap();
    h.sink.wait_for(2).await;
    open.push(open_relay(&h, &hello).await);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 4);
    h.shutdown().await;
}

#[tokio::test]
async fn an_idle_relay_is_closed_and_a_busy_one_is_not() {
    let hello = Hello::sni(API).bytes();
    let up = Upstream::start(hello.len()).await;
    let mut setup = Setup::new(Some(&up));
    setup.timeouts.idle = Duration::from_millis(400);
    let h = setup.start();

    // Busy: a byte every 100 ms for well past the idle limit keeps it open.
    let mut busy = open_relay(&h, &hello).await;
    for _ in 0..15 {
        busy.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(h.sink.records().is_empty(), "the busy relay was closed");

    // Idle: nothing either way; the gateway closes it on its own.
    expect_closed_without_eof(&mut busy).await;
    let r = &h.sink.wait_for(1).await[0];
    assert_eq!(r.decision, Verdict::Allow);
    assert_eq!(r.closed, Some("idle"), "{r:?}");
    assert_eq!(r.bytes_up, hello.len() as u64 + 15);
    h.shutdown().await;
}
