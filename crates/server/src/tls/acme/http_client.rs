//! The HTTP client instant-acme talks to the CA with: hyper over tokio-rustls (the
//! workspace's own stack), one connection per request, answers capped in size.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::HOST;
use http_body_util::{BodyExt as _, Limited};
use hyper_util::rt::TokioIo;
use instant_acme::{BodyWrapper, BytesBody, BytesResponse, HttpClient};
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::AcmeError;
use crate::tls::{pem_files, TlsError};

/// An ACME answer (a directory, an order, a certificate chain) is small.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;
const TIMEOUT: Duration = Duration::from_secs(30);

pub(super) struct AcmeHttp {
    tls: TlsConnector,
}

#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("the ACME URL {0} has no host")]
    NoHost(String),
    #[error("only https ACME directories are supported, not {0}")]
    NotHttps(String),
    #[error("connecting to the ACME server")]
    Io(#[from] std::io::Error),
    #[error("talking HTTP to the ACME server")]
    Http(#[from] hyper::Error),
    #[error("the ACME server did not answer within {}s", TIMEOUT.as_secs())]
    Timeout,
    #[error("reading the ACME server's answer")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl AcmeHttp {
    pub(super) fn new(extra_root: Option<&Path>) -> Result<AcmeHttp, TlsError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = extra_root {
            let text = std::fs::read(path).map_err(|source| AcmeError::DirectoryCa {
                path: path.to_owned(),
                source,
            })?;
            let certs = pem_files::chain_of(&text).ok_or_else(|| AcmeError::DirectoryCa {
                path: path.to_owned(),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "no PEM CERTIFICATE block",
                ),
            })?;
            for cert in certs {
                roots.add(cert).map_err(TlsError::Rustls)?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Rustls)?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![super::super::ALPN_HTTP1.to_vec()];
        Ok(AcmeHttp {
            tls: TlsConnector::from(Arc::new(config)),
        })
    }
}

/// An answer already read into memory.
struct Collected(Option<Bytes>);

#[async_trait::async_trait]
impl BytesBody for Collected {
    async fn into_bytes(&mut self) -> Result<Bytes, Box<dyn std::error::Error + Send + Sync>> {
        Ok(self.0.take().unwrap_or_default())
    }
}

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let tls = self.tls.clone();
        Box::pin(async move {
            match tokio::time::timeout(TIMEOUT, call(tls, req)).await {
                Ok(Ok(response)) => Ok(response),
                Ok(Err(e)) => Err(instant_acme::Error::Other(Box::new(e))),
                Err(_) => Err(instant_acme::Error::Other(Box::new(CallError::Timeout))),
            }
        })
    }
}

async fn call(
    tls: TlsConnector,
    req: http::Request<BodyWrapper<Bytes>>,
) -> Result<BytesResponse, CallError> {
    let (mut parts, body) = req.into_parts();
    let uri = parts.uri.clone();
    if uri.scheme_str() != Some("https") {
        return Err(CallError::NotHttps(uri.to_string()));
    }
    let host = uri
        .host()
        .ok_or_else(|| CallError::NoHost(uri.to_string()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(443);
    let name =
        ServerName::try_from(host.clone()).map_err(|_| CallError::NoHost(uri.to_string()))?;
    let tcp = TcpStream::connect((host.as_str(), port)).await?;
    let stream = tls.connect(name, tcp).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    if let Some(authority) = uri.authority() {
        if let Ok(value) = http::HeaderValue::from_str(authority.as_str()) {
            parts.headers.insert(HOST, value);
        }
    }
    parts.uri = uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/")
        .parse()
        .unwrap_or_default();
    let response = sender
        .send_request(http::Request::from_parts(parts, body))
        .await?;
    let (parts, body) = response.into_parts();
    let bytes = Limited::new(body, MAX_ANSWER_BYTES)
        .collect()
        .await
        .map_err(CallError::Body)?
        .to_bytes();
    Ok(BytesResponse {
        parts,
        body: Box::new(Collected(Some(bytes))),
    })
}
