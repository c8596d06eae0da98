//! Which certificate a handshake gets: the one currently served, or, for an ACME
//! validation connection (ALPN `acme-tls/1`), the challenge certificate for its name.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::ALPN_ACME_TLS;

#[derive(Debug, Default)]
pub struct CertResolver {
    current: RwLock<Option<Arc<CertifiedKey>>>,
    /// TLS-ALPN-01 certificates by lower-case DNS name, present while an order waits.
    challenges: RwLock<HashMap<String, Arc<CertifiedKey>>>,
}

impl CertResolver {
    /// The next handshake serves `certified`; connections already open keep theirs.
    pub fn set(&self, certified: Arc<CertifiedKey>) {
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Some(certified);
    }

    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_challenge(&self, name: &str, certified: Arc<CertifiedKey>) {
        self.challenges
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_ascii_lowercase(), certified);
    }

    pub(crate) fn clear_challenges(&self) {
        self.challenges
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let acme = hello
            .alpn()
            .is_some_and(|mut protocols| protocols.any(|p| p == ALPN_ACME_TLS));
        if acme {
            // A validation handshake gets the challenge certificate or nothing: RFC 8737
            // forbids answering it with the real certificate.
            let name = hello.server_name()?.to_ascii_lowercase();
            return self
                .challenges
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .get(&name)
                .cloned();
        }
        self.current()
    }
}
