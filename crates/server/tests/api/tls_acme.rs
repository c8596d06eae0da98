//! ACME for real: Debian's Pebble (a test ACME CA) validates the daemon with TLS-ALPN-01
//! by connecting to the daemon's own listener, finding it through pebble-challtestsrv's
//! mock DNS (every name is 127.0.0.1), and a client that trusts only Pebble's root then
//! gets a certificate for the name from the daemon. Skips (part `pebble`) without Pebble.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_server::config::TlsConfig;
use berth_server::tls::AcmeConfig;
use berth_server::{Server, ServerConfig};
use http::StatusCode;
use rustls::pki_types::CertificateDer;
use tokio::process::{Child, Command};

use crate::tls::{config_with, get_tls_as, install, wait_pinned, Serving, TestCa};

const NAME: &str = "box.berth.test";

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn(cmd: &mut Command, log: &Path) -> Child {
    let log = std::fs::File::create(log).unwrap();
    cmd.stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

async fn wait_listening(addr: SocketAddr, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {addr}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Pebble and its mock DNS, under a test CA for Pebble's own HTTPS that the daemon is told
/// of; stopped on drop.
struct Pebble {
    work: tempfile::TempDir,
    ca: TestCa,
    ca_file: std::path::PathBuf,
    acme_port: u16,
    mgmt_port: u16,
    children: Vec<Child>,
}

impl Pebble {
    /// The ports and files, before the daemon's port (which Pebble validates on) is known;
    /// `None` (skipped) without Pebble.
    fn prepare() -> Option<Pebble> {
        for tool in ["pebble", "pebble-challtestsrv"] {
            if which(tool).is_none() {
                berth_testkit::skip("pebble", format!("no `{tool}` (apt-get install pebble)"));
                return None;
            }
        }
        let work = tempfile::tempdir().unwrap();
        let ca = TestCa::new();
        let ca_file = work.path().join("ca.pem");
        std::fs::write(&ca_file, ca_pem(&ca)).unwrap();
        Some(Pebble {
            work,
            ca,
            ca_file,
            acme_port: free_port(),
            mgmt_port: free_port(),
            children: Vec::new(),
        })
    }

    /// Starts Pebble validating TLS-ALPN-01 on `tls_port`, issuing certificates valid for
    /// `validity_s`; returns its root once it answers.
    async fn run(&mut self, tls_port: u16, validity_s: u64) -> CertificateDer<'static> {
        let (cert_pem, key_pem, _) = self.ca.leaf();
        let (cert, key) = install(self.work.path(), &cert_pem, &key_pem);
        let dns_port = free_port();
        let config = serde_json::json!({"pebble": {
            "listenAddress": format!("127.0.0.1:{}", self.acme_port),
            "managementListenAddress": format!("127.0.0.1:{}", self.mgmt_port),
            "certificate": cert,
            "privateKey": key,
            // Pebble's validator dials the daemon's own port: TLS-ALPN-01 on the API listener.
            "tlsPort": tls_port,
            "httpPort": free_port(),
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "certificateValidityPeriod": validity_s,
        }});
        let config_file = self.work.path().join("pebble.json");
        std::fs::write(&config_file, config.to_string()).unwrap();
        self.children.push(spawn(
            Command::new("pebble-challtestsrv")
                .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
                .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                .args(["-management", &format!("127.0.0.1:{}", free_port())]),
            &self.work.path().join("challtestsrv.log"),
        ));
        self.children.push(spawn(
            Command::new("pebble")
                .arg("-config")
                .arg(&config_file)
                .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
                .env("PEBBLE_VA_NOSLEEP", "1")
                .env("PEBBLE_WFE_NONCEREJECT", "0"),
            &self.work.path().join("pebble.log"),
        ));
        wait_listening(([127, 0, 0, 1], self.acme_port).into(), "pebble").await;
        wait_listening(
            ([127, 0, 0, 1], self.mgmt_port).into(),
            "pebble's management",
        )
        .await;
        pebble_root(self.mgmt_port, &self.ca).await
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.work.path().join("pebble.log")).unwrap_or_default()
    }
}

/// Waits (bounded) until a handshake for [`NAME`] trusting only `root` presents a
/// certificate other than `not`.
async fn wait_for_issued(
    daemon: &Serving,
    root: &CertificateDer<'static>,
    not: Option<&CertificateDer<'static>>,
    pebble: &Pebble,
) -> CertificateDer<'static> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok((status, headers, cert)) = get_tls_as(daemon.addr, root, NAME, "/v1/health").await
        {
            if Some(&cert) != not {
                assert_eq!(status, StatusCode::OK);
                assert_eq!(headers["strict-transport-security"], "max-age=31536000");
                return cert;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no new certificate from pebble within 120s; pebble log:\n{}",
            pebble.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A daemon on `data` started with no certificate, Pebble issuing certificates valid for
/// `validity_s`: the daemon, Pebble's root, and the first certificate the daemon presents
/// for [`NAME`] to a client trusting only that root.
async fn first_certificate(
    pebble: &mut Pebble,
    data: &Path,
    validity_s: u64,
) -> (Serving, CertificateDer<'static>, CertificateDer<'static>) {
    let server = Server::bind(config_for(data, pebble.acme_port, &pebble.ca_file))
        .await
        .expect("the daemon binds with ACME and no certificate yet");
    let root = pebble.run(server.local_addr().port(), validity_s).await;
    let daemon = Serving::start(server);
    let presented = wait_for_issued(&daemon, &root, None, pebble).await;
    (daemon, root, presented)
}

#[tokio::test]
async fn a_certificate_from_pebble_through_tls_alpn_01_on_the_api_listener() {
    let Some(mut pebble) = Pebble::prepare() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    // The issued certificate, presented for the name to a client trusting Pebble's root.
    let (daemon, root, presented) = first_certificate(&mut pebble, data.path(), 157_766_400).await;
    wait_pinned(data.path(), &presented).await;

    // The account and the certificate are the daemon's user's alone.
    let acme = data.path().join("acme");
    assert_eq!(mode(&acme), 0o700);
    for file in ["account.json", "certificate.json"] {
        assert_eq!(mode(&acme.join(file)), 0o600, "{file}");
    }
    daemon.stop().await;

    // A restart serves the stored certificate from its first handshake, with no new order.
    let again = Server::bind(config_for(data.path(), pebble.acme_port, &pebble.ca_file))
        .await
        .unwrap();
    let daemon = Serving::start(again);
    let (status, _, cert) = get_tls_as(daemon.addr, &root, NAME, "/v1/health")
        .await
        .unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(cert, presented);
    daemon.stop().await;
}

#[tokio::test]
async fn a_certificate_is_renewed_before_it_expires_without_a_restart() {
    let Some(mut pebble) = Pebble::prepare() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    // 30-second certificates: due for renewal 20 seconds after issue.
    let (daemon, root, first) = first_certificate(&mut pebble, data.path(), 30).await;
    let renewed = wait_for_issued(&daemon, &root, Some(&first), &pebble).await;
    assert_ne!(renewed, first);
    wait_pinned(data.path(), &renewed).await;
    daemon.stop().await;
}

fn config_for(data: &Path, acme_port: u16, ca_file: &Path) -> ServerConfig {
    let acme = AcmeConfig {
        domains: vec![NAME.to_owned()],
        directory: format!("https://127.0.0.1:{acme_port}/dir"),
        email: Some("ops@berth.test".into()),
        directory_ca: Some(ca_file.to_owned()),
    };
    config_with(data, TlsConfig::Acme(acme))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn ca_pem(ca: &TestCa) -> String {
    pem::encode(&pem::Pem::new("CERTIFICATE", ca.der().to_vec()))
}

fn which(tool: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(tool))
            .find(|p| p.is_file())
    })
}

/// Pebble's root for this run, from its management port (served under our test CA).
async fn pebble_root(mgmt_port: u16, ca: &TestCa) -> rustls::pki_types::CertificateDer<'static> {
    use http_body_util::{BodyExt, Empty};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", mgmt_port))
        .await
        .unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = http::Request::get("/roots/0")
        .header("host", format!("localhost:{mgmt_port}"))
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let block = pem::parse(&body).expect("pebble's root is PEM");
    block.into_contents().into()
}

#[tokio::test]
async fn a_damaged_account_file_stops_the_start_instead_of_being_replaced() {
    let Some(mut pebble) = Pebble::prepare() else {
        return;
    };
    let data = tempfile::tempdir().unwrap();
    let (daemon, _, _) = first_certificate(&mut pebble, data.path(), 157_766_400).await;
    daemon.stop().await;

    // The account file is damaged (a bad restore, an edit), and a new name needs an order.
    let account = data.path().join("acme/account.json");
    let damaged = r#"{"directory": "https://"#;
    std::fs::write(&account, damaged).unwrap();
    let mut config = config_for(data.path(), pebble.acme_port, &pebble.ca_file);
    if let Some(TlsConfig::Acme(acme)) = &mut config.tls {
        acme.domains.push(format!("www.{NAME}"));
    }
    match Server::bind(config).await {
        Err(e) => {
            let message = berth_runtime::error_chain(&e);
            assert!(
                message.contains(&account.display().to_string())
                    && message.contains("remove it to register a new account"),
                "{message}"
            );
        }
        Ok(server) => {
            // What happened before: the order went on with a new account, written over
            // the old one.
            let daemon = Serving::start(server);
            let deadline = Instant::now() + Duration::from_secs(60);
            while std::fs::read_to_string(&account).unwrap() == damaged {
                assert!(
                    Instant::now() < deadline,
                    "the daemon started on a damaged account file"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            daemon.stop().await;
            panic!("the damaged account file was silently replaced by a new account");
        }
    }
    assert_eq!(
        std::fs::read_to_string(&account).unwrap(),
        damaged,
        "the account file is left for the operator"
    );
}
