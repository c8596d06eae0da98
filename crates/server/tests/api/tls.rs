//! The daemon over real TLS: certificate files made by rcgen under a test CA, a rustls
//! client that trusts only that CA, and the security headers on every answer.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_server::config::TlsConfig;
use berth_server::{Runtimes, Server, ServerConfig};
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::harness::{NoBoxes, TestServer};

/// A test CA that signs leaf certificates for `localhost` and 127.0.0.1.
pub struct TestCa {
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new() -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "berth test CA");
        TestCa {
            ca: CertifiedIssuer::self_signed(params, key).unwrap(),
        }
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.ca.der().clone()
    }

    /// A new leaf (new key) as `(cert PEM, key PEM, cert DER)`.
    pub fn leaf(&self) -> (String, String, CertificateDer<'static>) {
        let key = KeyPair::generate().unwrap();
        let params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        let cert = params.signed_by(&key, &*self.ca).unwrap();
        (cert.pem(), key.serialize_pem(), cert.der().clone())
    }
}

/// Writes a pair as a deploy tool would: each file replaced by a rename.
pub fn install(dir: &Path, cert_pem: &str, key_pem: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    for (path, text) in [(&key, key_pem), (&cert, cert_pem)] {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }
    (cert, key)
}

fn tls_config(data: &Path, cert: PathBuf, key: PathBuf) -> ServerConfig {
    config_with(data, TlsConfig::Files { cert, key })
}

/// A daemon without boxes serving `tls`.
pub fn config_with(data: &Path, tls: TlsConfig) -> ServerConfig {
    ServerConfig {
        data_dir: data.to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        runtimes: Runtimes::single(Arc::new(NoBoxes)),
        idle_check: Duration::from_secs(1),
        host: Default::default(),
        tls: Some(tls),
        public_url: None,
        role: Default::default(),
    }
}

/// A daemon serving in the background until stopped or dropped.
pub struct Serving {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), berth_server::ServerError>>,
}

impl Serving {
    pub fn start(server: Server) -> Serving {
        let addr = server.local_addr();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async move {
            let _ = rx.await;
        }));
        Serving {
            addr,
            stop: Some(tx),
            task,
        }
    }

    /// A graceful shutdown, which must end cleanly.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        (&mut self.task).await.unwrap().unwrap();
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A daemon without boxes serving certificate files, with its data dir.
struct TlsDaemon {
    serving: Serving,
    data: tempfile::TempDir,
}

impl TlsDaemon {
    async fn start(cert: PathBuf, key: PathBuf) -> TlsDaemon {
        TlsDaemon::start_with(cert, key, Default::default()).await
    }

    async fn start_with(cert: PathBuf, key: PathBuf, host: berth_server::HostConfig) -> TlsDaemon {
        let data = tempfile::tempdir().unwrap();
        let mut config = tls_config(data.path(), cert, key);
        config.host = host;
        let server = Server::bind(config)
            .await
            .expect("the daemon binds with TLS");
        TlsDaemon {
            serving: Serving::start(server),
            data,
        }
    }

    fn addr(&self) -> SocketAddr {
        self.serving.addr
    }

    async fn stop(self) {
        self.serving.stop().await
    }
}

/// Waits (bounded) until `berth.cert` leads with `cert`: the file follows the served
/// certificate a moment after the switch.
pub async fn wait_pinned(data: &Path, cert: &CertificateDer<'static>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read(data.join("berth.cert")).unwrap_or_default();
        let leaf = pem::parse_many(&text)
            .ok()
            .and_then(|b| b.into_iter().next());
        if leaf.is_some_and(|leaf| leaf.contents() == cert.as_ref()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "berth.cert does not hold the served certificate"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET path` over TLS trusting only `ca`: the status, the headers and the certificate the
/// server presented.
async fn get_tls(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    path: &str,
) -> Result<(StatusCode, HeaderMap, CertificateDer<'static>), std::io::Error> {
    get_tls_as(addr, ca, "localhost", path).await
}

/// [`get_tls`] for the server name `name`.
pub async fn get_tls_as(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    name: &str,
    path: &str,
) -> Result<(StatusCode, HeaderMap, CertificateDer<'static>), std::io::Error> {
    let request = http::Request::get(path)
        .header("host", format!("{name}:{}", addr.port()))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, headers, _, presented) = send_tls(addr, ca, name, request).await?;
    Ok((status, headers, presented))
}

/// One request to a daemon serving TLS for `localhost` under `ca`, with the API key
/// `key`: the status and the whole answer.
pub async fn request_tls(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    method: Method,
    path: &str,
    key: &str,
    body: Bytes,
) -> (StatusCode, Bytes) {
    let request = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("localhost:{}", addr.port()))
        .header("authorization", format!("Bearer {key}"))
        .body(Full::new(body))
        .unwrap();
    let (status, _, body, _) = send_tls(addr, ca, "localhost", request).await.unwrap();
    (status, body)
}

/// One request over TLS to the server name `name`, trusting only `ca`: the status, the
/// headers, the body and the certificate the server presented.
pub async fn send_tls(
    addr: SocketAddr,
    ca: &CertificateDer<'static>,
    name: &str,
    request: http::Request<Full<Bytes>>,
) -> Result<(StatusCode, HeaderMap, Bytes, CertificateDer<'static>), std::io::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(addr).await?;
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(name.to_owned()).unwrap(), tcp)
        .await?;
    let presented = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(conn);
    let response = sender
        .send_request(request)
        .await
        .map_err(std::io::Error::other)?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    Ok((parts.status, parts.headers, body, presented))
}

/// Waits (bounded) until a new handshake presents `want`.
async fn wait_for_cert(addr: SocketAddr, ca: &CertificateDer<'static>, want: &CertificateDer<'_>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, _, got) = get_tls(addr, ca, "/v1/health").await.unwrap();
        if got.as_ref() == want.as_ref() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the new certificate was not served within 30s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn https_serves_the_api_and_reloads_swapped_certificate_files() {
    let ca = TestCa::new();
    let files = tempfile::tempdir().unwrap();
    let (cert_pem, key_pem, first) = ca.leaf();
    let (cert, key) = install(files.path(), &cert_pem, &key_pem);
    let daemon = TlsDaemon::start(cert, key).await;

    let (status, headers, presented) = get_tls(daemon.addr(), &ca.der(), "/v1/health")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(presented, first);
    assert_eq!(headers["strict-transport-security"], "max-age=31536000");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    assert_eq!(
        headers["content-security-policy"],
        "default-src 'none'; frame-ancestors 'none'"
    );

    // The CLI on this host finds an https URL and the certificate to pin.
    let url = std::fs::read_to_string(daemon.data.path().join("berth.url")).unwrap();
    assert_eq!(url.trim(), format!("https://{}", daemon.addr()));
    let pinned = std::fs::read_to_string(daemon.data.path().join("berth.cert")).unwrap();
    assert_eq!(pinned.trim(), cert_pem.trim());

    // Plain HTTP on the TLS port gets no HTTP answer.
    let mut plain = TcpStream::connect(daemon.addr()).await.unwrap();
    plain
        .write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), plain.read_to_end(&mut answer)).await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "plain HTTP was answered: {:?}",
        String::from_utf8_lossy(&answer)
    );

    // A renewed pair dropped in place is served on the next handshake, no restart.
    let (cert_pem, key_pem, second) = ca.leaf();
    install(files.path(), &cert_pem, &key_pem);
    wait_for_cert(daemon.addr(), &ca.der(), &second).await;
    wait_pinned(daemon.data.path(), &second).await;
    daemon.stop().await;
}

#[tokio::test]
async fn a_silent_or_slow_tls_client_does_not_hold_up_others() {
    let ca = TestCa::new();
    let files = tempfile::tempdir().unwrap();
    let (cert_pem, key_pem, _) = ca.leaf();
    let (cert, key) = install(files.path(), &cert_pem, &key_pem);
    // A handshake timeout far longer than this test waits: only handshakes that do not
    // wait on each other can pass.
    let mut host = berth_server::HostConfig::default();
    host.server.header_timeout_s = 300;
    let daemon = TlsDaemon::start_with(cert, key, host).await;

    // One connects and says nothing; another sends half a ClientHello and stalls.
    let silent = TcpStream::connect(daemon.addr()).await.unwrap();
    let mut stalled = TcpStream::connect(daemon.addr()).await.unwrap();
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();

    let (status, _, _) = tokio::time::timeout(
        Duration::from_secs(20),
        get_tls(daemon.addr(), &ca.der(), "/v1/health"),
    )
    .await
    .expect("a third client is served while two stall their handshakes")
    .unwrap();
    assert_eq!(status, StatusCode::OK);
    // Nor do they hold up a shutdown: no request of theirs is in flight.
    tokio::time::timeout(Duration::from_secs(20), daemon.stop())
        .await
        .expect("the daemon stops while two handshakes stall");
    drop((silent, stalled));
}

#[tokio::test]
async fn bad_certificate_files_stop_the_start_naming_the_file() {
    let ca = TestCa::new();
    let files = tempfile::tempdir().unwrap();
    let (cert_pem, _, _) = ca.leaf();
    let (_, other_key, _) = ca.leaf();
    let data = tempfile::tempdir().unwrap();
    let start = |cert, key| Server::bind(tls_config(data.path(), cert, key));
    let missing = files.path().join("nope.pem");
    let (cert, key) = install(files.path(), &cert_pem, &other_key);
    let err = start(cert.clone(), missing.clone()).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("nope.pem") && msg.contains("--tls-key"),
        "{msg}"
    );

    let err = start(cert.clone(), key).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("does not belong to the certificate"), "{msg}");

    std::fs::write(&missing, "not pem").unwrap();
    let err = start(missing, cert).await.unwrap_err();
    assert!(err.to_string().contains("no PEM CERTIFICATE"), "{err}");
}

#[tokio::test]
async fn plain_http_answers_carry_the_headers_but_no_hsts() {
    let server = TestServer::without_runtime().await;
    for path in ["/v1/health", "/v1/boxes", "/no/such/route"] {
        let (_, headers, _) = server
            .raw(http::Method::GET, path, None, &[], Default::default())
            .await;
        assert_eq!(headers["x-content-type-options"], "nosniff", "{path}");
        assert_eq!(headers["referrer-policy"], "no-referrer", "{path}");
        assert_eq!(
            headers["content-security-policy"], "default-src 'none'; frame-ancestors 'none'",
            "{path}"
        );
        assert!(!headers.contains_key("strict-transport-security"), "{path}");
    }
}

/// A share link's cookie served over TLS is `Secure`: the browser never sends it over
/// plain HTTP (issue 20).
#[tokio::test]
async fn a_share_links_cookie_is_secure_over_tls() {
    let ca = TestCa::new();
    let files = tempfile::tempdir().unwrap();
    let (cert_pem, key_pem, _) = ca.leaf();
    let (cert, key) = install(files.path(), &cert_pem, &key_pem);
    let daemon = TlsDaemon::start(cert, key).await;
    let admin = std::fs::read_to_string(daemon.data.path().join("admin.key")).unwrap();
    let host = format!("localhost:{}", daemon.addr().port());
    let root = ca.der();
    let call = |method: http::Method, path: String, body: serde_json::Value| {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &host)
            .header("authorization", format!("Bearer {}", admin.trim()))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())))
            .unwrap();
        send_tls(daemon.addr(), &root, "localhost", request)
    };
    let (status, _, body, _) = call(
        http::Method::POST,
        "/v1/boxes".into(),
        serde_json::json!({"name": "web"}),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    let (status, _, body, _) = call(
        http::Method::POST,
        "/v1/boxes/web/ports/8000/links".into(),
        serde_json::json!({"ttl_s": 600}),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    let link: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let url = link["url"].as_str().unwrap();
    let path = &url[url.find("/v1/").unwrap()..];
    let (status, headers, _) = get_tls_as(daemon.addr(), &ca.der(), "localhost", path)
        .await
        .unwrap();
    assert_eq!(status, StatusCode::SEE_OTHER);
    let set_cookie = headers["set-cookie"].to_str().unwrap();
    assert!(
        set_cookie.starts_with("berth_port=bps_")
            && set_cookie.split("; ").any(|flag| flag == "Secure"),
        "{set_cookie}"
    );
    daemon.stop().await;
}
