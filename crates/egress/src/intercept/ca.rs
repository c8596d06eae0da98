//! The per-box CA: the box trusts it (its PEM goes into the box's trust store), and the
//! gateway signs with it a leaf for each host it intercepts. The key never leaves the host.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant};

use berth_protocol::BoxId;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
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
    #[error("the saved CA is damaged (bad certificate PEM or validity)")]
    Saved,
}

fn pem_of(der: &CertificateDer<'_>) -> String {
    pem::encode(&pem::Pem::new("CERTIFICATE", der.to_vec()))
}

/// The DER of the first `CERTIFICATE` block of `text`.
fn der_of_pem(text: &str) -> Option<CertificateDer<'static>> {
    let block = pem::parse(text).ok()?;
    (block.tag() == "CERTIFICATE").then(|| CertificateDer::from(block.into_contents()))
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
    /// What leaves are signed with: the CA's name and key.
    issuer: Issuer<'static, KeyPair>,
    /// The CA certificate's validity, kept to rebuild it identically ([`BoxCa::save`]).
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    /// The certificate the box trusts, served after each leaf. The same as `cert`'s DER for
    /// a new CA; for a restored one, the original (a re-signed copy differs in its signature).
    der: CertificateDer<'static>,
    leaves: Mutex<HashMap<String, (Instant, Arc<Leaf>)>>,
}

/// What it takes to bring a box's CA back after a daemon restart, while the box still
/// trusts it. Holds the private key: store it where only the host's root can read it.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct SavedCa {
    pub key_pem: String,
    pub cert_pem: String,
    /// Unix seconds: the validity the certificate was made with (rebuilt identically).
    pub not_before: i64,
    pub not_after: i64,
}

impl std::fmt::Debug for SavedCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SavedCa").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for BoxCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxCa").finish_non_exhaustive()
    }
}

impl BoxCa {
    /// A fresh CA (ECDSA P-256) named `berth egress <box id>`.
    pub fn new(box_id: &BoxId) -> Result<BoxCa, CaError> {
        let key = KeyPair::generate().map_err(CaError::Key)?;
        let now = OffsetDateTime::now_utc();
        let (issuer, cert) = Self::issuer(box_id, key, now - BACKDATE, now + CA_VALIDITY)?;
        Ok(BoxCa {
            issuer,
            not_before: now - BACKDATE,
            not_after: now + CA_VALIDITY,
            der: cert.der().clone(),
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// Everything [`BoxCa::restore`] needs.
    pub fn save(&self) -> SavedCa {
        SavedCa {
            key_pem: self.issuer.key().serialize_pem(),
            cert_pem: pem_of(&self.der),
            not_before: self.not_before.unix_timestamp(),
            not_after: self.not_after.unix_timestamp(),
        }
    }

    /// The CA of [`BoxCa::save`]: same key, name and validity, so leaves it signs chain to
    /// the certificate the box already trusts.
    pub fn restore(box_id: &BoxId, saved: &SavedCa) -> Result<BoxCa, CaError> {
        let key = KeyPair::from_pem(&saved.key_pem).map_err(CaError::Key)?;
        let time = |t| OffsetDateTime::from_unix_timestamp(t).map_err(|_| CaError::Saved);
        let (not_before, not_after) = (time(saved.not_before)?, time(saved.not_after)?);
        // Only the issuer is needed: the box trusts the saved certificate, not a re-signed
        // copy of it.
        let (issuer, _) = Self::issuer(box_id, key, not_before, not_after)?;
        let der = der_of_pem(&saved.cert_pem).ok_or(CaError::Saved)?;
        Ok(BoxCa {
            issuer,
            not_before,
            not_after,
            der,
            leaves: Mutex::new(HashMap::new()),
        })
    }

    /// The CA named for `box_id`: its issuer, and its certificate signed by itself.
    fn issuer(
        box_id: &BoxId,
        key: KeyPair,
        not_before: OffsetDateTime,
        not_after: OffsetDateTime,
    ) -> Result<(Issuer<'static, KeyPair>, rcgen::Certificate), CaError> {
        let name = format!("berth egress {}", box_id.as_str());
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
        params.not_before = not_before;
        params.not_after = not_after;
        let cert = params
            .self_signed(&key)
            .map_err(|source| CaError::Sign { name, source })?;
        Ok((Issuer::new(params, key), cert))
    }

    /// The CA certificate, PEM: what the box's trust store (and `SSL_CERT_FILE` …) gets.
    pub fn cert_pem(&self) -> String {
        pem_of(&self.der)
    }

    pub fn cert_der(&self) -> CertificateDer<'static> {
        self.der.clone()
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
            .signed_by(&key, &self.issuer)
            .map_err(|source| CaError::Sign {
                name: host.to_owned(),
                source,
            })?;
        Ok(Leaf {
            chain: vec![cert.der().clone(), self.der.clone()],
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

    #[test]
    fn a_restored_ca_signs_leaves_the_box_already_trusts() {
        let id = BoxId::from_random([8; 20]);
        let ca = BoxCa::new(&id).unwrap();
        let saved = ca.save();
        let back = BoxCa::restore(&id, &saved).unwrap();
        assert_eq!(back.cert_pem(), ca.cert_pem());
        let leaf = back.leaf("api.example.test").unwrap();
        assert_eq!(leaf.chain[1], ca.cert_der());
        // A client that trusts only the original certificate accepts the restored CA's leaf.
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca.cert_der()).unwrap();
        let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(
            Arc::new(roots),
            crate::intercept::provider(),
        )
        .build()
        .unwrap();
        use rustls::client::danger::ServerCertVerifier;
        let name = rustls::pki_types::ServerName::try_from("api.example.test").unwrap();
        verifier
            .verify_server_cert(
                &leaf.chain[0],
                &leaf.chain[1..],
                &name,
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .expect("the restored CA's leaf verifies against the original CA");
        let mut broken = saved.clone();
        broken.cert_pem = "not pem".into();
        assert!(matches!(BoxCa::restore(&id, &broken), Err(CaError::Saved)));
    }
}
