//! Joining a node to the cluster, without the HTTP route that carries it:
//!
//! 1. the node makes its own key and a certificate signing request ([`make_csr`]); the key
//!    never leaves the node;
//! 2. it sends a [`JoinRequest`] (a one-time token from `berth cluster token`, its name and
//!    the request) to an API replica, which [`answer`]s: the token is spent in the store,
//!    and the CA signs the request's key for that name;
//! 3. the node keeps the key, its certificate and the CA's in `<data dir>/cluster/`
//!    ([`NodeIdentity::save`]) and loads them at each start ([`NodeIdentity::load_or_none`]).

use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;

use berth_store::Store;
use rcgen::{CertificateParams, KeyPair};
use serde::{Deserialize, Serialize};

use super::ca::Identity;
use super::ca::{self, check_name, ClusterCa, Csr, Role};
use super::error::{ClusterError, PemOrigin};

/// The directory in a node's data dir that holds its cluster identity.
pub const CLUSTER_DIR: &str = "cluster";
pub const NODE_KEY_FILE: &str = "node.key";
pub const NODE_CERT_FILE: &str = "node.crt";
/// The CA's certificate as the node was given it when it joined.
pub const NODE_CA_FILE: &str = "ca.crt";

/// A node's new key (PKCS#8 PEM, to keep) and a request for a certificate of it (PEM, to
/// send). The request names the node, though the CA writes the names itself.
pub fn make_csr(node_name: &str) -> Result<(String, String), ClusterError> {
    check_name("node", node_name)?;
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|source| {
        ClusterError::Certificate {
            action: "generate the node's key",
            source,
        }
    })?;
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("berth node {node_name}"));
    let csr = params
        .serialize_request(&key)
        .and_then(|csr| csr.pem())
        .map_err(|source| ClusterError::Certificate {
            action: "make the node's certificate signing request",
            source,
        })?;
    Ok((key.serialize_pem(), csr))
}

/// What a joining node sends.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinRequest {
    /// `<id>.<secret>` from `berth cluster token`.
    pub token: String,
    pub node_name: String,
    /// PEM `CERTIFICATE REQUEST` from [`make_csr`].
    pub csr_pem: String,
}

impl std::fmt::Debug for JoinRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinRequest")
            .field("node_name", &self.node_name)
            .finish_non_exhaustive()
    }
}

/// What a joined node is given: its certificate and the CA's, both PEM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinResponse {
    pub cert_pem: String,
    pub ca_pem: String,
}

/// Admits the node of `req`: checks its name and request first (a malformed join spends no
/// token), spends one use of the token, and signs the request's key as that node's.
pub fn answer(
    ca: &ClusterCa,
    store: &Store,
    req: &JoinRequest,
) -> Result<JoinResponse, ClusterError> {
    check_name("node", &req.node_name)?;
    let role = Role::Node {
        node_name: req.node_name.clone(),
    };
    let csr = Csr::from_pem(&req.csr_pem)?;
    store.redeem_join_token(&req.token)?;
    let cert_pem = ca.issue(&role, &csr, &[])?;
    Ok(JoinResponse {
        cert_pem,
        ca_pem: ca.cert_pem().to_owned(),
    })
}

/// A joined node's identity, as kept in `<data dir>/cluster/`.
#[derive(Debug, Clone)]
pub struct NodeIdentity {
    /// The name the CA signed (read from the certificate).
    pub node_name: String,
    pub identity: Identity,
}

impl AsRef<Identity> for NodeIdentity {
    fn as_ref(&self) -> &Identity {
        &self.identity
    }
}

impl NodeIdentity {
    /// The node's identity kept in `dir` (`<data dir>/`[`CLUSTER_DIR`]), or `None` when it
    /// has not joined (no file of it). Half an identity, a key open to others or a
    /// certificate that is not a node's is an error.
    pub fn load_or_none(dir: &Path) -> Result<Option<NodeIdentity>, ClusterError> {
        let files = [NODE_KEY_FILE, NODE_CERT_FILE, NODE_CA_FILE];
        let present: Vec<bool> = files.iter().map(|f| dir.join(f).exists()).collect();
        if present.iter().all(|p| !p) {
            return Ok(None);
        }
        if let Some(i) = present.iter().position(|p| !p) {
            return Err(ClusterError::IncompleteIdentity {
                dir: dir.to_owned(),
                missing: files[i],
            });
        }
        let identity = Identity {
            key_pem: ca::read_private(&dir.join(NODE_KEY_FILE))?,
            cert_pem: ca::read_file(&dir.join(NODE_CERT_FILE))?,
            ca_pem: ca::read_file(&dir.join(NODE_CA_FILE))?,
        };
        checked(identity, dir).map(Some)
    }

    /// Checks and keeps what joining gave the node: `node.key` (`0600`), `node.crt` and
    /// `ca.crt` in `dir` (`<data dir>/`[`CLUSTER_DIR`], created `0700`), each replaced whole.
    pub fn save(
        dir: &Path,
        key_pem: &str,
        cert_pem: &str,
        ca_pem: &str,
    ) -> Result<NodeIdentity, ClusterError> {
        let identity = Identity {
            key_pem: key_pem.to_owned(),
            cert_pem: cert_pem.to_owned(),
            ca_pem: ca_pem.to_owned(),
        };
        let node = checked(identity, dir)?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(ca::io("create", dir))?;
        for (file, text, mode) in [
            (NODE_CA_FILE, ca_pem, 0o644),
            (NODE_CERT_FILE, cert_pem, 0o644),
            (NODE_KEY_FILE, key_pem, 0o600),
        ] {
            let path = dir.join(file);
            berth_basics::write_atomically(&path, text.as_bytes(), mode)
                .map_err(ca::io("write", &path))?;
        }
        Ok(node)
    }
}

/// The identity, if its certificate is a node's, its key is the certificate's, and the CA's
/// certificate parses.
fn checked(identity: Identity, dir: &Path) -> Result<NodeIdentity, ClusterError> {
    let cert_origin = PemOrigin::File(dir.join(NODE_CERT_FILE));
    let key_origin = PemOrigin::File(dir.join(NODE_KEY_FILE));
    let cert = ca::cert_of(&identity.cert_pem, cert_origin.clone())?;
    ca::cert_of(&identity.ca_pem, PemOrigin::File(dir.join(NODE_CA_FILE)))?;
    let key = ca::key_of(&identity.key_pem, key_origin.clone())?;
    ca::check_pair(&key, &cert, key_origin, cert_origin.clone())?;
    match ca::role_of(&cert) {
        Some(Role::Node { node_name }) => Ok(NodeIdentity {
            node_name,
            identity,
        }),
        _ => Err(ClusterError::WrongRole {
            origin: cert_origin,
            expected: "node",
            found: ca::berth_uris(&cert).unwrap_or_default(),
        }),
    }
}
