//! One push delivered: encrypted for its subscription (RFC 8291), signed with VAPID (RFC
//! 8292) and POSTed to the push service (RFC 8030) on a connection of its own, all within
//! [`TIMEOUT`]. A push service that says the subscription is gone (404, 410) has it
//! deleted; the verdict tells the sender whether the service itself is failing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use berth_runtime::error_chain;
use berth_store::Store;
use bytes::Bytes;
use http::{header, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

use super::config::PushHostConfig;
use super::encrypt::{self, EncryptError};
use super::endpoint::{self, Endpoint, EndpointRefused};
use super::outgoing::Outgoing;
use super::vapid::{VapidError, VapidKey};

/// One delivery's whole time: resolve, connect, TLS, request, answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// How long a push service keeps a message for a browser that is offline (RFC 8030 `TTL`).
const TTL_S: &str = "86400";

/// What one delivery says about its push service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The service answered, whatever it said of this subscription; or the push was never
    /// sent for a reason of its own (its keys, the endpoint no longer allowed).
    Answered,
    /// The service is busy or failing (429, 5xx, no answer, no connection): try it again
    /// after its `Retry-After` if it named one.
    Failing { retry_after: Option<Duration> },
}

/// What a delivery needs.
pub(crate) struct Delivery {
    pub store: Arc<Store>,
    pub vapid: Arc<VapidKey>,
    pub config: Arc<PushHostConfig>,
    pub tls: Arc<rustls::ClientConfig>,
}

impl Delivery {
    /// Delivers one push within [`TIMEOUT`]; logs what happened.
    pub async fn deliver(&self, outgoing: &Outgoing) -> Verdict {
        let sub = &outgoing.subscription;
        let sent = tokio::time::timeout(TIMEOUT, self.post(outgoing))
            .await
            .unwrap_or(Err(SendError::Timeout));
        match sent {
            Ok((status, _)) if status.is_success() => {
                tracing::debug!(subscription = %sub.id, %status, "push delivered");
                Verdict::Answered
            }
            Ok((status @ (StatusCode::NOT_FOUND | StatusCode::GONE), _)) => {
                tracing::info!(subscription = %sub.id, %status, "the push service says the subscription is gone: deleting it");
                if let Err(e) = self.store.delete_push_subscription(&sub.tenant_id, &sub.id) {
                    tracing::warn!(subscription = %sub.id, error = %error_chain(&e), "cannot delete a gone push subscription");
                }
                Verdict::Answered
            }
            Ok((status, retry_after))
                if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() =>
            {
                tracing::warn!(subscription = %sub.id, %status, "the push service is busy or failing");
                Verdict::Failing { retry_after }
            }
            Ok((status, _)) => {
                tracing::warn!(subscription = %sub.id, %status, "the push service refused a push");
                Verdict::Answered
            }
            Err(e) => {
                tracing::warn!(subscription = %sub.id, error = %error_chain(&e), "push not delivered");
                match e {
                    SendError::Timeout | SendError::Connect(_) | SendError::Http(_) => {
                        Verdict::Failing { retry_after: None }
                    }
                    _ => Verdict::Answered,
                }
            }
        }
    }

    async fn post(&self, outgoing: &Outgoing) -> Result<(StatusCode, Option<Duration>), SendError> {
        let sub = &outgoing.subscription;
        // Checked again: `[push] allow_endpoints` may have shrunk since it was subscribed.
        let endpoint = endpoint::check(&sub.endpoint, &self.config)?;
        let (ua_public, auth) = match (
            URL_SAFE_NO_PAD.decode(&sub.p256dh),
            URL_SAFE_NO_PAD.decode(&sub.auth),
        ) {
            (Ok(p), Ok(a)) => (p, a),
            _ => return Err(SendError::StoredKeys),
        };
        let body = encrypt::encrypt(&outgoing.plaintext, &ua_public, &auth)?;
        let authorization = self
            .vapid
            .authorization(&endpoint.origin, &self.config.subject)?;
        let request = http::Request::post(endpoint.path_and_query.as_str())
            .header(header::HOST, host_header(&endpoint))
            .header(header::AUTHORIZATION, authorization)
            .header(header::CONTENT_ENCODING, "aes128gcm")
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(header::CONTENT_LENGTH, body.len())
            .header("ttl", TTL_S)
            .header("urgency", "normal")
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| SendError::Request)?;
        let tcp = connect(&endpoint).await?;
        if !endpoint.https {
            return send(tcp, request).await;
        }
        let name = ServerName::try_from(endpoint.host.clone()).map_err(|_| SendError::Request)?;
        let stream = tokio_rustls::TlsConnector::from(self.tls.clone())
            .connect(name, tcp)
            .await
            .map_err(SendError::Tls)?;
        send(stream, request).await
    }
}

/// A connection to the endpoint's host; one that was not allowed by the operator must
/// resolve to public addresses only (a push service's name re-pointed at the host's own
/// network is refused, not dialled).
async fn connect(endpoint: &Endpoint) -> Result<tokio::net::TcpStream, SendError> {
    let host = endpoint.host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, endpoint.port))
        .await
        .map_err(SendError::Resolve)?
        .collect();
    if !endpoint.allowed_by_config {
        if let Some((addr, reason)) = addrs
            .iter()
            .find_map(|a| berth_egress::address::forbidden_reason(a.ip()).map(|r| (*a, r)))
        {
            return Err(SendError::Forbidden { addr, reason });
        }
    }
    tokio::net::TcpStream::connect(&addrs[..])
        .await
        .map_err(SendError::Connect)
}

/// `Retry-After` in seconds (a date is not worth parsing here), within 1 to 60 s.
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let seconds: u64 = headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds.clamp(1, 60)))
}

/// Sends the request on its own HTTP/1.1 connection; the answer's status and
/// `Retry-After` (its body is not read: nothing from a push service is kept).
async fn send<IO>(
    io: IO,
    request: http::Request<Full<Bytes>>,
) -> Result<(StatusCode, Option<Duration>), SendError>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(SendError::Http)?;
    let conn = tokio::spawn(conn);
    let response = sender.send_request(request).await.map_err(SendError::Http);
    conn.abort();
    let response = response?;
    Ok((response.status(), retry_after(response.headers())))
}

fn host_header(endpoint: &Endpoint) -> String {
    let default = if endpoint.https { 443 } else { 80 };
    if endpoint.port == default {
        endpoint.host.clone()
    } else {
        format!("{}:{}", endpoint.host, endpoint.port)
    }
}

/// The web's public roots, as the egress gateway trusts upstream.
pub(crate) fn tls_config() -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default protocol versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

#[derive(Debug, thiserror::Error)]
enum SendError {
    #[error("the endpoint is no longer allowed")]
    Refused(#[from] EndpointRefused),
    #[error("the stored subscription keys are not base64url")]
    StoredKeys,
    #[error("cannot encrypt the push")]
    Encrypt(#[from] EncryptError),
    #[error("cannot sign the VAPID token")]
    Vapid(#[from] VapidError),
    #[error("cannot build the request")]
    Request,
    #[error("cannot resolve the push service")]
    Resolve(#[source] std::io::Error),
    #[error("the push service resolves to {addr}, {reason}: refused")]
    Forbidden {
        addr: SocketAddr,
        reason: &'static str,
    },
    #[error("cannot connect to the push service")]
    Connect(#[source] std::io::Error),
    #[error("TLS with the push service failed")]
    Tls(#[source] std::io::Error),
    #[error("HTTP with the push service failed")]
    Http(#[source] hyper::Error),
    #[error("no answer from the push service within {} s", TIMEOUT.as_secs())]
    Timeout,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(host: &str, port: u16, allowed_by_config: bool) -> Endpoint {
        Endpoint {
            https: !allowed_by_config,
            host: host.to_owned(),
            port,
            origin: format!("https://{host}:{port}"),
            path_and_query: "/".to_owned(),
            allowed_by_config,
        }
    }

    /// A name that passed the endpoint check but resolves to the host's own network (DNS
    /// re-pointed, or `/etc/hosts`) is refused before any connection.
    #[tokio::test]
    async fn a_name_resolving_to_a_private_address_is_not_dialled() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        match connect(&endpoint("localhost", port, false)).await {
            Err(SendError::Forbidden { addr, .. }) => assert!(addr.ip().is_loopback(), "{addr}"),
            other => panic!("dialled: {other:?}"),
        }
        // Only an origin the operator listed reaches it.
        let stream = connect(&endpoint("127.0.0.1", port, true)).await.unwrap();
        assert_eq!(stream.peer_addr().unwrap().port(), port);
    }
}
