//! The TLS configurations between the API replicas and the nodes, both ends authenticated
//! by the cluster CA and nothing else (no public roots):
//!
//! - a node's listener ([`node_server_config`]) requires a client certificate that chains
//!   to the CA and names an API replica (`berth://api/*`): a node never takes calls from
//!   another node, nor from a box that got hold of a node's files;
//! - an API replica's calls to a node ([`api_client_config`]) present the replica's
//!   certificate and accept only the node they meant: the chain is checked against the
//!   fixed name [`NODE_SERVER_NAME`] (nodes are dialled by address), then the certificate
//!   must name exactly `berth://node/<name>` of the row the replica routed by. A node
//!   answering on another node's address is refused.
//!
//! TLS 1.3 only: both ends are berth.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::ca::{berth_uris, cert_of, role_of, ClusterCa, Identity, Role, NODE_SERVER_NAME};
use super::error::{ClusterError, PemOrigin, WrongPeer};

/// Parsed for rustls, checked to be a pair and of the role wanted.
struct Loaded {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    roots: Arc<rustls::RootCertStore>,
}

impl Identity {
    /// The role its certificate names.
    pub fn role(&self) -> Result<Role, ClusterError> {
        let origin = PemOrigin::Given("the identity's certificate");
        let cert = cert_of(&self.cert_pem, origin.clone())?;
        role_of(&cert).ok_or_else(|| ClusterError::WrongRole {
            origin,
            expected: "node or API replica",
            found: berth_uris(&cert).unwrap_or_default(),
        })
    }

    fn load(
        &self,
        expected: &'static str,
        fits: fn(&Role) -> bool,
    ) -> Result<Loaded, ClusterError> {
        let cert_origin = PemOrigin::Given("the identity's certificate");
        let key_origin = PemOrigin::Given("the identity's key");
        let cert = cert_of(&self.cert_pem, cert_origin.clone())?;
        match role_of(&cert) {
            Some(role) if fits(&role) => {}
            _ => {
                return Err(ClusterError::WrongRole {
                    origin: cert_origin,
                    expected,
                    found: berth_uris(&cert).unwrap_or_default(),
                })
            }
        }
        let pair = super::ca::key_of(&self.key_pem, key_origin.clone())?;
        super::ca::check_pair(&pair, &cert, key_origin.clone(), cert_origin)?;
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).map_err(|source| {
            ClusterError::NoPem {
                origin: key_origin,
                expected: "PRIVATE KEY",
                source,
            }
        })?;
        let ca_origin = PemOrigin::Given("the cluster CA certificate");
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(cert_of(&self.ca_pem, ca_origin)?)
            .map_err(|source| ClusterError::Tls {
                action: "trust the cluster CA",
                source,
            })?;
        Ok(Loaded {
            chain: vec![cert],
            key,
            roots: Arc::new(roots),
        })
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The name an API replica gives rustls when it dials a node (any address): the chain is
/// checked against it, the node's identity by [`api_client_config`]'s verifier.
pub fn node_server_name() -> ServerName<'static> {
    ServerName::try_from(NODE_SERVER_NAME).expect("a valid DNS name")
}

/// The node's listener: serves `node`'s certificate (a node's) and requires an API
/// replica's certificate from the CA of `node.ca_pem`. Set `alpn_protocols` on it as the
/// listener needs.
pub fn node_server_config(
    node: &impl AsRef<Identity>,
) -> Result<rustls::ServerConfig, ClusterError> {
    let loaded = node
        .as_ref()
        .load("node", |role| matches!(role, Role::Node { .. }))?;
    let chain_check = WebPkiClientVerifier::builder_with_provider(loaded.roots, provider())
        .build()
        .map_err(ClusterError::Verifier)?;
    rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|source| ClusterError::Tls {
            action: "choose TLS 1.3",
            source,
        })?
        .with_client_cert_verifier(Arc::new(ApiReplicasOnly { chain_check }))
        .with_single_cert(loaded.chain, loaded.key)
        .map_err(|source| ClusterError::Tls {
            action: "serve the node's certificate",
            source,
        })
}

/// An API replica's calls to the node named `node_name`: presents `api`'s certificate (an
/// API replica's), trusts only the CA of `api.ca_pem`, and accepts only a certificate that
/// names `berth://node/<node_name>`. Connect with [`node_server_name`].
pub fn api_client_config(
    api: &Identity,
    node_name: &str,
) -> Result<rustls::ClientConfig, ClusterError> {
    super::ca::check_name("node", node_name)?;
    let loaded = api.load("API replica", |role| matches!(role, Role::Api { .. }))?;
    let chain_check = WebPkiServerVerifier::builder_with_provider(loaded.roots, provider())
        .build()
        .map_err(ClusterError::Verifier)?;
    let verifier = ExpectedNode {
        chain_check,
        expected: Role::Node {
            node_name: node_name.to_owned(),
        },
    };
    rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|source| ClusterError::Tls {
            action: "choose TLS 1.3",
            source,
        })?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_client_auth_cert(loaded.chain, loaded.key)
        .map_err(|source| ClusterError::Tls {
            action: "present the API replica's certificate",
            source,
        })
}

/// An API replica's side of the cluster: the CA (for joins), the replica's own identity,
/// made with the CA at its start, and one client configuration per node, kept so that
/// connections to a node resume their TLS sessions.
pub struct ApiTls {
    ca: Arc<ClusterCa>,
    identity: Identity,
    replica: String,
    per_node: Mutex<HashMap<String, Arc<rustls::ClientConfig>>>,
}

impl std::fmt::Debug for ApiTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiTls")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl ApiTls {
    /// Issues the replica `replica` its key and certificate with `ca`.
    pub fn new(ca: Arc<ClusterCa>, replica: &str) -> Result<ApiTls, ClusterError> {
        let identity = ca.self_issue_api(replica)?;
        // Checked once here, so `for_node` fails only on a node's name.
        identity.load("API replica", |role| matches!(role, Role::Api { .. }))?;
        Ok(ApiTls {
            ca,
            identity,
            replica: replica.to_owned(),
            per_node: Mutex::new(HashMap::new()),
        })
    }

    /// The cluster CA, which answers joins ([`super::join::answer`]).
    pub fn ca(&self) -> &ClusterCa {
        &self.ca
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// The configuration for calls to the node named `node_name` (its row's name): connect
    /// with [`node_server_name`].
    pub fn for_node(&self, node_name: &str) -> Result<Arc<rustls::ClientConfig>, ClusterError> {
        let mut per_node = self.per_node.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(config) = per_node.get(node_name) {
            return Ok(config.clone());
        }
        let config = Arc::new(api_client_config(&self.identity, node_name)?);
        per_node.insert(node_name.to_owned(), config.clone());
        Ok(config)
    }
}

/// A handshake error that says which peer was refused and why.
fn wrong_peer(expected: String, cert: &CertificateDer<'_>) -> rustls::Error {
    let presented = berth_uris(cert).unwrap_or_default();
    rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
        WrongPeer {
            expected,
            presented,
        },
    ))))
}

/// WebPKI's chain check, then: the client is an API replica.
#[derive(Debug)]
struct ApiReplicasOnly {
    chain_check: Arc<dyn ClientCertVerifier>,
}

impl ClientCertVerifier for ApiReplicasOnly {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.chain_check.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .chain_check
            .verify_client_cert(end_entity, intermediates, now)?;
        match role_of(end_entity) {
            Some(Role::Api { .. }) => Ok(verified),
            _ => Err(wrong_peer("berth://api/*".to_owned(), end_entity)),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain_check.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain_check.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain_check.supported_verify_schemes()
    }
}

/// WebPKI's chain check against [`NODE_SERVER_NAME`] (whatever address was dialled), then:
/// the server is the node expected.
#[derive(Debug)]
struct ExpectedNode {
    chain_check: Arc<WebPkiServerVerifier>,
    expected: Role,
}

impl ServerCertVerifier for ExpectedNode {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _dialled: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.chain_check.verify_server_cert(
            end_entity,
            intermediates,
            &node_server_name(),
            ocsp_response,
            now,
        )?;
        match role_of(end_entity) {
            Some(role) if role == self.expected => Ok(verified),
            _ => Err(wrong_peer(self.expected.uri(), end_entity)),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain_check.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain_check.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain_check.supported_verify_schemes()
    }
}
