//! The cluster CA, its mTLS configurations and joining, against real TLS handshakes over
//! loopback TCP: the right pair connects; a node posing as an API replica, a client with no
//! certificate, the wrong node, and a certificate of another CA on either side do not.

use std::os::unix::fs::PermissionsExt as _;
use std::sync::Arc;

use berth_store::Store;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::ca::Identity;
use super::ca::{berth_uris, role_of, ClusterCa, Csr, Role, CA_KEY_FILE, NODE_SERVER_NAME};
use super::error::ClusterError;
use super::join::{answer, make_csr, JoinRequest, NodeIdentity, CLUSTER_DIR, NODE_KEY_FILE};
use super::mtls::{api_client_config, node_server_config, node_server_name, ApiTls};

fn new_ca() -> (tempfile::TempDir, ClusterCa) {
    let dir = tempfile::tempdir().unwrap();
    let ca = ClusterCa::init(&dir.path().join("ca")).unwrap();
    (dir, ca)
}

fn node(ca: &ClusterCa, name: &str) -> Identity {
    let (key_pem, csr) = make_csr(name).unwrap();
    let role = Role::Node {
        node_name: name.into(),
    };
    let cert_pem = ca
        .issue(
            &role,
            &Csr::from_pem(&csr).unwrap(),
            &["10.0.0.5", "n.example"],
        )
        .unwrap();
    Identity {
        key_pem,
        cert_pem,
        ca_pem: ca.cert_pem().to_owned(),
    }
}

fn cert_der(pem: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()
}

/// A client built with rustls alone, trusting `ca_pem` for [`NODE_SERVER_NAME`] and
/// presenting `cert` if given: what a node or a box holding stolen files could try.
fn plain_client(ca_pem: &str, cert: Option<&Identity>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der(ca_pem)).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    match cert {
        Some(id) => builder
            .with_client_auth_cert(
                vec![cert_der(&id.cert_pem)],
                PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    }
}

/// A handshake over loopback TCP and one message from the server. In TLS 1.3 the client's
/// certificate is judged after the client thinks it is done, so a refusal of the client
/// shows in its first read.
async fn handshake(
    server: rustls::ServerConfig,
    client: rustls::ClientConfig,
) -> Result<(), String> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(server));
    let connector = TlsConnector::from(Arc::new(client));
    let server_side = async {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut tls = acceptor
            .accept(tcp)
            .await
            .map_err(|e| format!("server: {e}"))?;
        tls.write_all(b"hello")
            .await
            .map_err(|e| format!("server write: {e}"))?;
        tls.shutdown()
            .await
            .map_err(|e| format!("server close: {e}"))
    };
    let client_side = async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        // Dialled by address, like a node's row gives it.
        let mut tls = connector
            .connect(node_server_name(), tcp)
            .await
            .map_err(|e| format!("client: {e}"))?;
        let mut got = [0u8; 5];
        tls.read_exact(&mut got)
            .await
            .map_err(|e| format!("client read: {e}"))?;
        assert_eq!(&got, b"hello");
        Ok::<(), String>(())
    };
    let (server, client) = tokio::join!(server_side, client_side);
    match (server, client) {
        (Ok(()), Ok(())) => Ok(()),
        (server, client) => Err(format!("{server:?} / {client:?}")),
    }
}

#[tokio::test]
async fn an_api_replica_reaches_the_node_it_meant() {
    let (_dir, ca) = new_ca();
    let n1 = node(&ca, "n1");
    let api = ca.self_issue_api("api-1").unwrap();
    handshake(
        node_server_config(&n1).unwrap(),
        api_client_config(&api, "n1").unwrap(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_node_is_no_client_of_another_node() {
    let (_dir, ca) = new_ca();
    let n1 = node(&ca, "n1");
    let n2 = node(&ca, "n2");
    let err = handshake(
        node_server_config(&n1).unwrap(),
        plain_client(ca.cert_pem(), Some(&n2)),
    )
    .await
    .unwrap_err();
    assert!(err.contains("berth://api/*"), "{err}");
    assert!(err.contains("berth://node/n2"), "{err}");
    // Nor will berth build it a client configuration.
    assert!(matches!(
        api_client_config(&n2, "n1"),
        Err(ClusterError::WrongRole { .. })
    ));
}

#[tokio::test]
async fn a_client_without_a_certificate_is_refused() {
    let (_dir, ca) = new_ca();
    let n1 = node(&ca, "n1");
    let err = handshake(
        node_server_config(&n1).unwrap(),
        plain_client(ca.cert_pem(), None),
    )
    .await
    .unwrap_err();
    assert!(err.contains("server: peer sent no certificates"), "{err}");
}

#[tokio::test]
async fn a_node_answering_for_another_is_refused() {
    let (_dir, ca) = new_ca();
    let n2 = node(&ca, "n2");
    let api = ca.self_issue_api("api-1").unwrap();
    let err = handshake(
        node_server_config(&n2).unwrap(),
        api_client_config(&api, "n1").unwrap(),
    )
    .await
    .unwrap_err();
    assert!(err.contains("WrongPeer"), "{err}");
    assert!(
        err.contains("berth://node/n1") && err.contains("berth://node/n2"),
        "{err}"
    );
}

#[tokio::test]
async fn a_certificate_of_another_ca_is_refused_on_either_side() {
    let (_dir, ca) = new_ca();
    let (_other_dir, other) = new_ca();
    let api = ca.self_issue_api("api-1").unwrap();

    // A node of another cluster.
    let stranger = node(&other, "n1");
    let err = handshake(
        node_server_config(&stranger).unwrap(),
        api_client_config(&api, "n1").unwrap(),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("client: invalid peer certificate: UnknownIssuer"),
        "{err}"
    );

    // An API replica of another cluster that trusts this one's nodes.
    let n1 = node(&ca, "n1");
    let mut intruder = other.self_issue_api("api-1").unwrap();
    intruder.ca_pem = ca.cert_pem().to_owned();
    let err = handshake(
        node_server_config(&n1).unwrap(),
        api_client_config(&intruder, "n1").unwrap(),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("server: invalid peer certificate: UnknownIssuer"),
        "{err}"
    );
}

#[test]
fn a_node_certificate_carries_what_the_ca_decided_not_what_was_asked() {
    let (_dir, ca) = new_ca();
    let key = rcgen::KeyPair::generate().unwrap();
    let mut wish = rcgen::CertificateParams::new(vec!["evil.example".to_owned()]).unwrap();
    wish.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    wish.subject_alt_names
        .push(rcgen::SanType::URI("berth://api/evil".try_into().unwrap()));
    let csr = wish.serialize_request(&key).unwrap().pem().unwrap();
    let role = Role::Node {
        node_name: "n1".into(),
    };
    let pem = ca.issue(&role, &Csr::from_pem(&csr).unwrap(), &[]).unwrap();
    let der = cert_der(&pem);
    assert_eq!(berth_uris(&der).unwrap(), ["berth://node/n1"]);
    let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert!(!parsed.is_ca());
    let dns: Vec<String> = parsed
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some((*d).to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(dns, [NODE_SERVER_NAME]);
}

#[test]
fn a_name_that_is_not_a_plain_path_segment_is_refused() {
    for bad in ["", "a/b", "../x", "-x", "a b", "é", &"a".repeat(254)] {
        assert!(
            matches!(make_csr(bad), Err(ClusterError::InvalidName { .. })),
            "{bad:?}"
        );
    }
    for uri in [
        "berth://node/a/b",
        "berth://node/",
        "berth://box/x",
        "https://node/x",
    ] {
        assert_eq!(Role::from_uri(uri), None, "{uri}");
    }
    assert_eq!(
        Role::from_uri("berth://api/api-1.zone_a"),
        Some(Role::Api {
            replica: "api-1.zone_a".into()
        })
    );
}

#[test]
fn the_ca_is_made_once_and_loaded_only_with_a_private_key() {
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("ca");
    assert!(matches!(
        ClusterCa::load(&ca_dir),
        Err(ClusterError::CaMissing { .. })
    ));
    let made = ClusterCa::init(&ca_dir).unwrap();
    let key = ca_dir.join(CA_KEY_FILE);
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(matches!(
        ClusterCa::init(&ca_dir),
        Err(ClusterError::CaExists { .. })
    ));

    let loaded = ClusterCa::load(&ca_dir).unwrap();
    assert_eq!(loaded.cert_pem(), made.cert_pem());
    // What the loaded CA signs chains to the CA as made.
    let n1 = node(&loaded, "n1");
    assert_eq!(
        role_of(&cert_der(&n1.cert_pem)),
        Some(Role::Node {
            node_name: "n1".into()
        })
    );

    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = ClusterCa::load(&ca_dir).unwrap_err();
    assert!(
        matches!(err, ClusterError::KeyNotPrivate { mode: 0o640, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("chmod 600"), "{err}");

    // Another CA's key beside this certificate.
    let (other_dir, _other) = new_ca();
    std::fs::copy(other_dir.path().join("ca").join(CA_KEY_FILE), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    assert!(matches!(
        ClusterCa::load(&ca_dir),
        Err(ClusterError::KeyMismatch { .. })
    ));
}

#[tokio::test]
async fn a_node_joins_with_a_token_once() {
    let (dir, ca) = new_ca();
    let store = Store::open(&dir.path().join("berth.db")).unwrap();
    let token = store
        .create_join_token(1, std::time::Duration::from_secs(600))
        .unwrap();
    let (key_pem, csr_pem) = make_csr("n1").unwrap();
    let mut request = JoinRequest {
        token: token.clone(),
        node_name: "n1".into(),
        csr_pem: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"
            .into(),
    };
    // Garbage is refused, and spends nothing.
    let err = answer(&ca, &store, &request).unwrap_err();
    assert!(matches!(err, ClusterError::BadCsr { .. }), "{err}");
    assert!(
        format!("{:?}", request).find(&token).is_none(),
        "the token is never logged"
    );

    request.csr_pem = csr_pem;
    let joined = answer(&ca, &store, &request).unwrap();
    assert_eq!(joined.ca_pem, ca.cert_pem());
    assert_eq!(
        role_of(&cert_der(&joined.cert_pem)),
        Some(Role::Node {
            node_name: "n1".into()
        })
    );
    let err = answer(&ca, &store, &request).unwrap_err();
    assert!(matches!(err, ClusterError::TokenRefused { .. }), "{err}");

    // The node keeps what it was given, and serves with it.
    let data = tempfile::tempdir().unwrap();
    let cluster = data.path().join(CLUSTER_DIR);
    assert!(NodeIdentity::load_or_none(&cluster).unwrap().is_none());
    NodeIdentity::save(&cluster, &key_pem, &joined.cert_pem, &joined.ca_pem).unwrap();
    let key_file = cluster.join(NODE_KEY_FILE);
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let kept = NodeIdentity::load_or_none(&cluster).unwrap().unwrap();
    assert_eq!(kept.node_name, "n1");
    // As an API replica holds its side: the CA, its own identity, a config per node.
    let api = ApiTls::new(Arc::new(ca), "api-1").unwrap();
    let to_n1 = api.for_node("n1").unwrap();
    assert!(
        Arc::ptr_eq(&to_n1, &api.for_node("n1").unwrap()),
        "kept per node"
    );
    handshake(node_server_config(&kept).unwrap(), (*to_n1).clone())
        .await
        .unwrap();
    let to_n2 = (*api.for_node("n2").unwrap()).clone();
    handshake(node_server_config(&kept).unwrap(), to_n2)
        .await
        .unwrap_err();

    // Half an identity is an error, not a node that has not joined.
    std::fs::remove_file(&key_file).unwrap();
    assert!(matches!(
        NodeIdentity::load_or_none(&cluster),
        Err(ClusterError::IncompleteIdentity {
            missing: "node.key",
            ..
        })
    ));
}

#[test]
fn an_identity_whose_key_is_not_its_certificates_is_refused() {
    let (_dir, ca) = new_ca();
    let n1 = node(&ca, "n1");
    let n2 = node(&ca, "n2");
    let data = tempfile::tempdir().unwrap();
    assert!(matches!(
        NodeIdentity::save(data.path(), &n2.key_pem, &n1.cert_pem, &n1.ca_pem),
        Err(ClusterError::KeyMismatch { .. })
    ));
    let api = ca.self_issue_api("api-1").unwrap();
    assert!(matches!(
        NodeIdentity::save(data.path(), &api.key_pem, &api.cert_pem, &api.ca_pem),
        Err(ClusterError::WrongRole { .. })
    ));
    assert!(
        NodeIdentity::load_or_none(data.path()).unwrap().is_none(),
        "nothing written"
    );
}
