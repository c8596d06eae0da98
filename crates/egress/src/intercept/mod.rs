//! TLS interception for hosts with a credential rule (ARCHITECTURE.md "Egress"): the
//! gateway terminates the box's TLS with a leaf signed by the box's own CA, checks and
//! rewrites each request head (credentials stripped, the real secret set only for the
//! box's placeholder on a rule host), and re-encrypts upstream against webpki roots.
//!
//! Every response from such a host is scrubbed on its way back: the real secrets of the
//! box's rules are replaced by their placeholders in heads and bodies (`scrub`,
//! `response`), so an upstream that echoes requests hands the box nothing.
//!
//! One request per connection: the gateway sends `Connection: close` upstream and to the
//! box, so every request is a fresh connection whose head is read and checked. After the
//! head the body and the response are streamed as they come (SSE is never buffered).

mod body;
mod ca;
mod http1;
mod path;
mod proxy;
mod replay;
mod response;
mod rules;
mod scrub;

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use scrub::Secrets;

pub use body::{copy_body, BodyError, Framing};
pub use ca::{BoxCa, CaError, Leaf, SavedCa};
pub use http1::RequestShape;
pub use http1::{
    read_head, rewrite_request, HeadReadError, Kind, Refusal, Rewritten, WithheldFrom,
    MAX_HEAD_BYTES,
};
pub use proxy::{InterceptError, Served};
pub use replay::Replay;
pub use rules::{is_method, CredentialRule, RuleError, Withheld, CREDENTIAL_HEADERS};

/// One box's interception settings.
#[derive(Debug, Clone)]
pub struct InterceptConfig {
    pub rules: Vec<CredentialRule>,
    /// CAs trusted upstream in addition to the webpki roots (`extra_roots` in `berth.toml`).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// How long the box has for its TLS handshake and its request head, and the upstream
    /// for its TLS handshake.
    pub handshake_timeout: Duration,
}

impl InterceptConfig {
    pub fn new(rules: Vec<CredentialRule>) -> Self {
        InterceptConfig {
            rules,
            extra_roots: Vec::new(),
            handshake_timeout: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InterceptSetupError {
    #[error("extra root {index} is not a usable CA certificate")]
    ExtraRoot {
        index: usize,
        #[source]
        source: rustls::Error,
    },
    #[error("building the upstream TLS configuration")]
    Tls(#[source] rustls::Error),
}

/// What the gateway needs to intercept one box's streams.
#[derive(Debug)]
pub struct Interceptor {
    ca: BoxCa,
    rules: Vec<CredentialRule>,
    secrets: Secrets,
    upstream: Arc<ClientConfig>,
    handshake_timeout: Duration,
}

impl Interceptor {
    pub fn new(ca: BoxCa, config: InterceptConfig) -> Result<Interceptor, InterceptSetupError> {
        let mut roots = RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for (index, der) in config.extra_roots.into_iter().enumerate() {
            roots
                .add(der)
                .map_err(|source| InterceptSetupError::ExtraRoot { index, source })?;
        }
        let mut upstream = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(InterceptSetupError::Tls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Interceptor {
            ca,
            secrets: Secrets::new(&config.rules),
            rules: config.rules,
            upstream: Arc::new(upstream),
            handshake_timeout: config.handshake_timeout,
        })
    }

    pub fn ca(&self) -> &BoxCa {
        &self.ca
    }

    /// Whether streams to `host` (canonical) are intercepted: some rule names it.
    pub fn intercepts(&self, host: &str) -> bool {
        self.rules.iter().any(|r| r.applies_to(host))
    }
}

/// ring, explicitly: the process-wide default provider depends on which rustls features
/// other crates in the binary happen to enable.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
