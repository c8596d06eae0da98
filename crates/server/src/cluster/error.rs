//! Errors of the cluster's certificate authority, its mTLS configurations and joining.

use std::path::PathBuf;

use berth_store::StoreError;

/// Where a PEM text came from, for messages: a file, or a field of a request or an
/// identity held in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PemOrigin {
    File(PathBuf),
    Given(&'static str),
}

impl std::fmt::Display for PemOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PemOrigin::File(path) => write!(f, "{}", path.display()),
            PemOrigin::Given(what) => f.write_str(what),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "no cluster CA in {}: make one with `berth cluster init --dir {}`, or copy that \
         directory from the API host that made it",
        dir.display(), dir.display()
    )]
    CaMissing { dir: PathBuf },

    #[error(
        "{} already holds a cluster CA (ca.crt or ca.key); every node's certificate chains to \
         it, so it is not replaced. Use it, or move it away first to start a new cluster",
        dir.display()
    )]
    CaExists { dir: PathBuf },

    #[error(
        "{} is open to other users (mode {mode:04o}); a private key must be 0600: run \
         `chmod 600 {}`",
        path.display(), path.display()
    )]
    KeyNotPrivate { path: PathBuf, mode: u32 },

    #[error("{origin} holds no PEM {expected}")]
    NoPem {
        origin: PemOrigin,
        expected: &'static str,
        #[source]
        source: rustls::pki_types::pem::Error,
    },

    #[error("{origin} is not a usable private key (berth writes PKCS#8 PEM keys)")]
    BadKey {
        origin: PemOrigin,
        #[source]
        source: rcgen::Error,
    },

    #[error("{origin} is not a readable X.509 certificate")]
    BadCert { origin: PemOrigin },

    #[error("the key {key} does not belong to the certificate {cert}; keep the pair together")]
    KeyMismatch { key: PemOrigin, cert: PemOrigin },

    #[error("the certificate {origin} is not a berth {expected} certificate (it names {found:?})")]
    WrongRole {
        origin: PemOrigin,
        expected: &'static str,
        found: Vec<String>,
    },

    #[error(
        "the certificate signing request is not a PEM CSR signed by its own key \
         (make it with berth_server::cluster::join::make_csr)"
    )]
    BadCsr {
        #[source]
        source: rcgen::Error,
    },

    #[error("the certificate signing request is {bytes} bytes, more than {max}")]
    CsrTooLarge { bytes: usize, max: usize },

    #[error("invalid {role} name {name:?}: {rule}")]
    InvalidName {
        role: &'static str,
        name: String,
        rule: &'static str,
    },

    #[error("cannot {action}")]
    Certificate {
        action: &'static str,
        #[source]
        source: rcgen::Error,
    },

    #[error("cannot build the cluster's TLS configuration ({action})")]
    Tls {
        action: &'static str,
        #[source]
        source: rustls::Error,
    },

    #[error("cannot build the cluster's certificate verifier")]
    Verifier(#[source] rustls::server::VerifierBuilderError),

    #[error(
        "the node identity in {} is incomplete ({missing} is missing); remove that directory \
         and join the node again with a new token",
        dir.display()
    )]
    IncompleteIdentity { dir: PathBuf, missing: &'static str },

    /// The store refused the join token: the one refusal a joining node is told about.
    #[error("the join token was refused ({reason}); make a new one with `berth cluster token`")]
    TokenRefused { reason: &'static str },

    #[error("cannot redeem the join token")]
    Store(#[source] StoreError),

    #[error("the OS random source failed")]
    Random(#[source] getrandom::Error),
}

impl From<StoreError> for ClusterError {
    fn from(e: StoreError) -> ClusterError {
        match e {
            StoreError::JoinTokenRefused { reason } => ClusterError::TokenRefused { reason },
            other => ClusterError::Store(other),
        }
    }
}

/// Why a handshake refused a peer whose chain was good: it is not the peer expected. Inside
/// a `rustls::Error` (`CertificateError::Other`), so it must be `Send + Sync` on its own.
#[derive(Debug, thiserror::Error)]
#[error("the peer's certificate names {presented:?}, not {expected}")]
pub struct WrongPeer {
    /// `berth://node/<name>`, or `berth://api/*` for any API replica.
    pub expected: String,
    /// The `berth://` URIs of its certificate.
    pub presented: Vec<String>,
}
