use crate::fixture::{assert_deny, connect_head, Setup, API};
use berth_egress::gateway::{Verdict, Via};
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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
