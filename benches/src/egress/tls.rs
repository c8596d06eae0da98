//! A throwaway CA and a leaf for [`HOST`](super::HOST), and the rustls configs (ring) of
//! both ends: the upstream serves the leaf, the client trusts only the CA.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("making the test certificates")]
    Cert(#[from] rcgen::Error),
    #[error("building a rustls config")]
    Rustls(#[from] rustls::Error),
}

/// Both ends' configs, sharing one test CA.
pub struct TestPki {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

impl TestPki {
    pub fn new(host: &str) -> Result<TestPki, TlsSetupError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key)?;

        let leaf_key = KeyPair::generate()?;
        let leaf = CertificateParams::new(vec![host.to_string()])?.signed_by(&leaf_key, &*ca)?;

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let server = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![leaf.der().clone()], key)?;

        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(ca.der().to_vec()))?;
        let mut client = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // Every setup is a full handshake, as for a fresh `curl` or SDK process in a box;
        // resumption would only make all paths equally cheaper.
        client.resumption = rustls::client::Resumption::disabled();
        Ok(TestPki {
            server: Arc::new(server),
            client: Arc::new(client),
        })
    }
}
