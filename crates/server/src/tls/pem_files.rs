//! Reading a PEM certificate chain and its private key into what rustls serves.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer,
};
use rustls::sign::CertifiedKey;

use super::TlsError;

/// A certificate chain with its key, checked to belong together.
pub(crate) struct Loaded {
    pub certified: Arc<CertifiedKey>,
}

/// Reads `cert` (a chain, leaf first) and `key`; either missing, empty, unparsable or not
/// matching the other is an error naming the file.
pub(crate) fn load_pair(cert: &Path, key: &Path) -> Result<Loaded, TlsError> {
    let read = |what, path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            what,
            path: path.to_owned(),
            source,
        })
    };
    let cert_pem = read("cert", cert)?;
    let key_pem = read("key", key)?;
    let chain = chain_of(&cert_pem).ok_or_else(|| TlsError::NoPem {
        what: "cert",
        path: cert.to_owned(),
        expected: "CERTIFICATE block",
    })?;
    let private = key_of(&key_pem).ok_or_else(|| TlsError::NoPem {
        what: "key",
        path: key.to_owned(),
        expected: "PRIVATE KEY block",
    })?;
    let certified = certified(chain, private).map_err(|e| match e {
        PairError::Key(source) => TlsError::BadKey {
            path: key.to_owned(),
            source,
        },
        PairError::Mismatch(source) => TlsError::Mismatch {
            cert: cert.to_owned(),
            key: key.to_owned(),
            source,
        },
    })?;
    Ok(Loaded { certified })
}

pub(crate) enum PairError {
    Key(rustls::Error),
    Mismatch(rustls::Error),
}

/// Pairs a chain with its key, refusing a key that is not the leaf's.
pub(crate) fn certified(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
) -> Result<Arc<CertifiedKey>, PairError> {
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(PairError::Key)?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(PairError::Mismatch)?;
    Ok(Arc::new(certified))
}

/// Every CERTIFICATE block, in order; `None` when there is none.
pub(crate) fn chain_of(pem_text: &[u8]) -> Option<Vec<CertificateDer<'static>>> {
    let blocks = pem::parse_many(pem_text).ok()?;
    let chain: Vec<_> = blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(|b| CertificateDer::from(b.into_contents()))
        .collect();
    (!chain.is_empty()).then_some(chain)
}

/// The first private key block (PKCS#8, PKCS#1 RSA or SEC1 EC).
pub(crate) fn key_of(pem_text: &[u8]) -> Option<PrivateKeyDer<'static>> {
    pem::parse_many(pem_text)
        .ok()?
        .into_iter()
        .find_map(|b| match b.tag() {
            "PRIVATE KEY" => Some(PrivatePkcs8KeyDer::from(b.into_contents()).into()),
            "RSA PRIVATE KEY" => Some(PrivatePkcs1KeyDer::from(b.into_contents()).into()),
            "EC PRIVATE KEY" => Some(PrivateSec1KeyDer::from(b.into_contents()).into()),
            _ => None,
        })
}
