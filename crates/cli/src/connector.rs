//! The one way the CLI reaches the daemon, for plain calls, event streams and WebSockets
//! alike: TCP, then TLS when the URL is `https://`. A daemon on this host (its `https://`
//! URL came from `berth.url`) must present exactly the certificate it wrote to
//! `berth.cert`; any other `https://` URL is checked against the public web roots.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// Which certificates an `https://` daemon may present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Exactly this one (the local daemon's `berth.cert`).
    Pinned(CertificateDer<'static>),
    /// Any certificate for the host name from a public web root.
    WebRoots,
}

/// A connection to the daemon, plain or TLS.
pub enum DaemonStream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// Wraps `tcp` in TLS for `host` (a DNS name or an IP address) under `trust`.
pub async fn tls(tcp: TcpStream, host: &str, trust: &Trust) -> io::Result<DaemonStream> {
    let name = ServerName::try_from(host.to_owned())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let connector = TlsConnector::from(client_config(trust)?);
    let stream = connector.connect(name, tcp).await?;
    Ok(DaemonStream::Tls(Box::new(stream)))
}

fn client_config(trust: &Trust) -> io::Result<Arc<rustls::ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?;
    let mut config = match trust {
        Trust::Pinned(cert) => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pinned {
                cert: cert.clone(),
                provider,
            }))
            .with_no_client_auth(),
        Trust::WebRoots => {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            builder.with_root_certificates(roots).with_no_client_auth()
        }
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts one certificate, whatever its name or issuer, and still checks the handshake's
/// signatures: the server must hold that certificate's key, not merely send its bytes.
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::ApplicationVerificationFailure,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl AsyncRead for DaemonStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            DaemonStream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            DaemonStream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for DaemonStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            DaemonStream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            DaemonStream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            DaemonStream::Plain(s) => Pin::new(s).poll_flush(cx),
            DaemonStream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            DaemonStream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            DaemonStream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
