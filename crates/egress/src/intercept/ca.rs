//! The per-box CA: the box trusts it (its PEM goes into the box's trust store), and the
//! gateway signs with it a leaf for each host it intercepts. The key never leaves the host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant};

use berth_protocol::BoxId;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use time::{Duration, OffsetDateTime};

/// A leaf is valid this long; it is re-minted well before, so a long-lived gateway never
/// serves an expired one.
const LEAF_VALIDITY: Duration = Duration::days(30);
const LEAF_REFRESH: StdDuration = StdDuration::from_secs(7 * 24 * 3600);
/// The CA outlives any realistic box; a box that does gets a new CA at its next boot.
const CA_VALIDITY: Duration = Duration::days(3650);
/// Clock skew between host and box must not make a fresh certificate "not yet valid".
const BACKDATE: Duration = Duration::days(1);

#[derive(Debug, thiserror::Error)]
pub enum CaError {
    #[error("generating a key pair")]
    Key(#[source] rcgen::Error),
    #[error("building the certificate for {name:?}")]
    Params {
        name: String,
        #[source]
        source: rcgen::Error,
    },
    #[error("signing the certificate for {name:?}")]
    Sign {
        name: String,
        #[source]
        source: rcgen::Error,
    },
}

/// A minted leaf: the chain to serve (leaf, then the CA) and its private key.
pub struct Leaf {
    pub chain: Vec<CertificateDer<'static>>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl Leaf {
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key.clone_key())
    }
}

impl std::fmt::Debug for Leaf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leaf")
            .field("chain_len", &self.chain.len())
            .finish_non_exhaustive()
    }
}

pub struct BoxCa {
    key: KeyPair,
    cert: rcgen::Certificate,
    leaves: Mutex<HashMap<String, (Instant, Arc<Leaf>)>>,
}

impl std::fmt::Debug for BoxCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxCa").finish_non_exhaustive()
    }
}

impl BoxCa {
    /// A fresh CA (ECDSA P-256) named `berth egress <box id>`.
    pub fn new(box_id: &BoxId) -> Result<BoxCa, CaError> {
        let name = format!("berth egress {}", box_id.as_str());
        let key = KeyPair::generate().map_err(CaError::Key)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, name.clone());
        params.distinguished_name = dn;
        // pathlen 0: it signs leaves only, never another CA.
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - BACKDATE;
        params.not_after = now + CA_VALIDITY;
        let cert = params
            .self_signed(&key)
            .map_err(|source| CaError::Sign { name, source })?;
        Ok(BoxCa {
            key,
            cert,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA certificate, PEM: what the box's trust store (and `SSL_CERT_FILE` …) gets.
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// The leaf for `host` (a canonical name), minted on first use and cached.
    pub fn leaf(&self, host: &str) -> Result<Arc<Leaf>, CaError> {
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((minted, leaf)) = leaves.get(host) {
            if minted.elapsed() < LEAF_REFRESH {
                return Ok(leaf.clone());
            }
        }
        let leaf = Arc::new(self.mint(host)?);
        leaves.insert(host.to_owned(), (Instant::now(), leaf.clone()));
        Ok(leaf)
    }

    fn mint(&self, host: &str) -> Result<Leaf, CaError> {
        let key = KeyPair::generate().map_err(CaError::Key)?;
        let mut params =
            CertificateParams::new(vec![host.to_owned()]).map_err(|source| CaError::Params {
                name: host.to_owned(),
                source,
            })?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - BACKDATE;
        params.not_after = now + LEAF_VALIDITY;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(|source| CaError::Sign {
                name: host.to_owned(),
                source,
            })?;
        Ok(Leaf {
            chain: vec![cert.der().clone(), self.cert.der().clone()],
            key: PrivatePkcs8KeyDer::from(key.serialize_der()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_box_and_caches_leaves_per_host() {
        let id = BoxId::from_random([7; 20]);
        let ca = BoxCa::new(&id).unwrap();
        assert!(ca.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        let a = ca.leaf("api.example.test").unwrap();
        let again = ca.leaf("api.example.test").unwrap();
        let b = ca.leaf("other.example.test").unwrap();
        assert!(Arc::ptr_eq(&a, &again));
        assert_ne!(a.chain[0], b.chain[0]);
        assert_eq!(a.chain[1], ca.cert_der());
    }
}
