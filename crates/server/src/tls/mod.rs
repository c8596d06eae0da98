//! Serving the API over TLS: certificate files reloaded when they change ([`files`]), or
//! certificates from an ACME CA ([`acme`]), picked per handshake by one resolver
//! ([`resolver`]) that also answers ACME's TLS-ALPN-01 challenges.
//!
//! The certificate being served is also written to `<data dir>/berth.cert`, so the CLI on
//! this host can pin exactly it when it talks to `https://` from `berth.url`.

pub mod acme;
mod der_time;
pub mod files;
mod pem_files;
pub mod resolver;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use tokio_rustls::TlsAcceptor;

pub use acme::AcmeConfig;
use resolver::CertResolver;

/// The ALPN protocol the API speaks (WebSockets ride HTTP/1.1 upgrades).
pub const ALPN_HTTP1: &[u8] = b"http/1.1";
/// The ALPN protocol of ACME's TLS-ALPN-01 validation (RFC 8737).
pub const ALPN_ACME_TLS: &[u8] = b"acme-tls/1";

/// The certificate the daemon serves, for the local CLI to pin.
pub const CERT_FILE: &str = "berth.cert";

/// How the daemon gets the certificate it serves.
#[derive(Debug, Clone)]
pub enum TlsConfig {
    /// PEM files made elsewhere (a chain, then a key), reloaded when they change.
    Files { cert: PathBuf, key: PathBuf },
    /// Certificates from an ACME CA, validated with TLS-ALPN-01 on the API's own listener.
    Acme(AcmeConfig),
}

/// A request extension on every request that came over TLS (HSTS is sent only then; a
/// handler deriving its public URL can read it too).
#[derive(Debug, Clone, Copy)]
pub struct ServedOverTls;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(
        "cannot read the TLS {what} {} (pass a readable PEM file to --tls-{what})",
        path.display()
    )]
    Read {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "the TLS {what} {} holds no PEM {expected} (pass a PEM file to --tls-{what})",
        path.display()
    )]
    NoPem {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },

    #[error(
        "the TLS key {} is not a usable key (pass an RSA, ECDSA or Ed25519 PEM key)",
        path.display()
    )]
    BadKey {
        path: PathBuf,
        #[source]
        source: rustls::Error,
    },

    #[error(
        "the TLS key {} does not belong to the certificate {} (pass the key the certificate was made for)",
        key.display(), cert.display()
    )]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },

    #[error("cannot set up TLS")]
    Rustls(#[source] rustls::Error),

    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(transparent)]
    Acme(#[from] acme::AcmeError),
}

/// TLS for the listener: the acceptor and the tasks that keep its certificate current.
pub struct Tls {
    pub acceptor: TlsAcceptor,
    resolver: Arc<CertResolver>,
    config: TlsConfig,
    data_dir: PathBuf,
}

/// Checks the files a start will need, so `berth up` fails on them at once, before the
/// runtimes are prepared.
pub fn check(config: &TlsConfig) -> Result<(), TlsError> {
    match config {
        TlsConfig::Files { cert, key } => pem_files::load_pair(cert, key).map(drop),
        TlsConfig::Acme(acme) => acme::check(acme),
    }
}

impl Tls {
    /// Loads the certificate (files) or the stored one (ACME; none yet is fine) and builds
    /// the acceptor. Bad files fail here, before the daemon listens.
    pub fn load(config: TlsConfig, data_dir: &Path) -> Result<Tls, TlsError> {
        let resolver = Arc::new(CertResolver::default());
        let mut alpn = vec![ALPN_HTTP1.to_vec()];
        match &config {
            TlsConfig::Files { cert, key } => {
                let loaded = pem_files::load_pair(cert, key)?;
                resolver.set(loaded.certified);
            }
            TlsConfig::Acme(acme) => {
                alpn.push(ALPN_ACME_TLS.to_vec());
                acme::check_account(acme, data_dir)?;
                match acme::load_stored(acme, data_dir) {
                    Ok(Some(stored)) => resolver.set(stored.certified),
                    Ok(None) => {}
                    // A damaged store is no reason to stay down: a new order replaces it.
                    Err(e) => tracing::warn!(
                        error = %berth_runtime::error_chain(&e),
                        "the stored ACME certificate is unreadable; a new one will be ordered"
                    ),
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut server = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Rustls)?
            .with_no_client_auth()
            .with_cert_resolver(resolver.clone());
        server.alpn_protocols = alpn;
        let tls = Tls {
            acceptor: TlsAcceptor::from(Arc::new(server)),
            resolver,
            config,
            data_dir: data_dir.to_owned(),
        };
        tls.write_cert_file()?;
        Ok(tls)
    }

    /// Keeps the certificate current until dropped: watches the files, or orders and renews
    /// from the ACME CA.
    pub fn spawn_upkeep(&self) -> tokio::task::JoinHandle<()> {
        let resolver = self.resolver.clone();
        let data_dir = self.data_dir.clone();
        match self.config.clone() {
            TlsConfig::Files { cert, key } => {
                tokio::spawn(files::watch(cert, key, resolver, data_dir))
            }
            TlsConfig::Acme(acme) => tokio::spawn(acme::maintain(acme, resolver, data_dir)),
        }
    }

    fn write_cert_file(&self) -> Result<(), TlsError> {
        write_cert_file(&self.resolver, &self.data_dir)
    }
}

/// Removes a `berth.cert` left by an earlier TLS start: a plain-HTTP daemon pins nothing.
pub(crate) fn forget_cert_file(data_dir: &Path) -> Result<(), TlsError> {
    write_cert_file(&CertResolver::default(), data_dir)
}

/// Writes the served chain to `<data dir>/berth.cert` (replaced atomically, so a CLI never
/// reads half of it), or removes a stale one when nothing is served yet.
pub(crate) fn write_cert_file(resolver: &CertResolver, data_dir: &Path) -> Result<(), TlsError> {
    let path = data_dir.join(CERT_FILE);
    let Some(current) = resolver.current() else {
        return match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(TlsError::Io {
                action: "remove",
                path,
                source: e,
            }),
            _ => Ok(()),
        };
    };
    let text: String = current.cert.iter().map(pem_of).collect();
    berth_basics::write_atomically(&path, text.as_bytes(), 0o644).map_err(|source| TlsError::Io {
        action: "replace",
        path: path.clone(),
        source,
    })
}

pub(crate) fn pem_of(der: &CertificateDer<'_>) -> String {
    let config = pem::EncodeConfig::new().set_line_ending(pem::LineEnding::LF);
    pem::encode_config(&pem::Pem::new("CERTIFICATE", der.to_vec()), config)
}
