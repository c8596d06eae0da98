//! Sending pushes: a bounded queue and one worker that encrypts each message for its
//! subscription and POSTs it to the push service (RFC 8030), with VAPID auth. A full
//! queue drops the push with a warning (a notification is a nicety; memory is not), and
//! each delivery has 10 s. A push service that says the subscription is gone (404, 410)
//! has it deleted; one that is busy or failing (429, 5xx, no answer) gets the push once
//! more after its `Retry-After` (1 to 60 s; 10 s when it names none), while at most
//! [`MAX_PENDING_RETRIES`] wait; other failures are logged.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use berth_store::push_subscriptions::PushSubscription;
use berth_store::Store;
use bytes::Bytes;
use http::{header, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use super::config::PushHostConfig;
use super::encrypt::{self, EncryptError};
use super::endpoint::{self, Endpoint, EndpointRefused};
use super::vapid::{VapidError, VapidKey};
use berth_runtime::error_chain;

/// Pushes waiting for the worker; more are dropped.
pub const QUEUE: usize = 256;

/// One delivery's whole time: resolve, connect, TLS, request, answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Deliveries to one push service (one origin) at once.
pub const MAX_IN_FLIGHT_PER_SERVICE: usize = 4;

/// Pushes waiting to be tried again; past this a failed push is not retried.
pub const MAX_PENDING_RETRIES: usize = 64;

/// The wait before a retry when the push service names none.
const RETRY_AFTER: Duration = Duration::from_secs(10);

/// How long a push service keeps a message for a browser that is offline (RFC 8030 `TTL`).
const TTL_S: &str = "86400";

/// One push: the subscription it goes to and its plaintext (JSON).
#[derive(Debug)]
pub struct Outgoing {
    pub subscription: PushSubscription,
    pub plaintext: Vec<u8>,
    /// Already tried once (a push is retried at most once).
    retried: bool,
}

impl Outgoing {
    pub fn new(subscription: PushSubscription, plaintext: Vec<u8>) -> Outgoing {
        Outgoing {
            subscription,
            plaintext,
            retried: false,
        }
    }
}

/// The queue's sending end.
#[derive(Debug)]
pub struct Sender {
    queue: mpsc::Sender<Outgoing>,
}

impl Sender {
    /// Queues a push; drops it (logged) when the queue is full.
    pub fn send(&self, outgoing: Outgoing) {
        if let Err(e) = self.queue.try_send(outgoing) {
            let (why, outgoing) = match e {
                mpsc::error::TrySendError::Full(o) => ("the push queue is full", o),
                mpsc::error::TrySendError::Closed(o) => ("the push worker has stopped", o),
            };
            tracing::warn!(subscription = %outgoing.subscription.id, "push dropped: {why}");
        }
    }
}

/// What the worker needs.
pub(crate) struct Worker {
    pub store: Arc<Store>,
    pub vapid: Arc<VapidKey>,
    pub config: Arc<PushHostConfig>,
}

impl Worker {
    /// Starts the worker; it ends when the returned sender (and its clones) are dropped.
    pub fn spawn(self) -> Sender {
        let (queue, mut rx) = mpsc::channel(QUEUE);
        let tls = Arc::new(tls_config());
        // Weak: the worker must not keep its own queue open (it ends with the daemon).
        let requeue = queue.downgrade();
        let retries = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_RETRIES));
        tokio::spawn(async move {
            while let Some(outgoing) = rx.recv().await {
                if let Some((outgoing, after)) = self.deliver(&tls, outgoing).await {
                    retry_later(&requeue, &retries, outgoing, after);
                }
            }
        });
        Sender { queue }
    }

    /// Delivers one push; the push and when to retry it, if it should be.
    async fn deliver(
        &self,
        tls: &Arc<rustls::ClientConfig>,
        outgoing: Outgoing,
    ) -> Option<(Outgoing, Duration)> {
        let sub = &outgoing.subscription;
        let sent = tokio::time::timeout(TIMEOUT, self.post(tls, &outgoing))
            .await
            .unwrap_or(Err(SendError::Timeout));
        let retry = match &sent {
            Ok((status, after))
                if *status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() =>
            {
                Some(after.unwrap_or(RETRY_AFTER))
            }
            Err(SendError::Timeout | SendError::Connect(_) | SendError::Http(_)) => {
                Some(RETRY_AFTER)
            }
            _ => None,
        };
        match sent.map(|(status, _)| status) {
            Ok(status) if status.is_success() => {
                tracing::debug!(subscription = %sub.id, %status, "push delivered");
            }
            Ok(status @ (StatusCode::NOT_FOUND | StatusCode::GONE)) => {
                tracing::info!(subscription = %sub.id, %status, "the push service says the subscription is gone: deleting it");
                if let Err(e) = self.store.delete_push_subscription(&sub.tenant_id, &sub.id) {
                    tracing::warn!(subscription = %sub.id, error = %error_chain(&e), "cannot delete a gone push subscription");
                }
            }
            Ok(status) => {
                tracing::warn!(subscription = %sub.id, %status, "the push service refused a push")
            }
            Err(e) => {
                tracing::warn!(subscription = %sub.id, error = %error_chain(&e), "push not delivered")
            }
        }
        retry
            .filter(|_| !outgoing.retried)
            .map(|after| (outgoing, after))
    }

    async fn post(
        &self,
        tls: &Arc<rustls::ClientConfig>,
        outgoing: &Outgoing,
    ) -> Result<(StatusCode, Option<Duration>), SendError> {
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
        let stream = tokio_rustls::TlsConnector::from(tls.clone())
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

/// Tries `outgoing` once more after `after`, unless [`MAX_PENDING_RETRIES`] already wait.
fn retry_later(
    requeue: &mpsc::WeakSender<Outgoing>,
    retries: &Arc<tokio::sync::Semaphore>,
    mut outgoing: Outgoing,
    after: Duration,
) {
    let Ok(permit) = retries.clone().try_acquire_owned() else {
        tracing::warn!(subscription = %outgoing.subscription.id, "push not retried: too many retries wait");
        return;
    };
    outgoing.retried = true;
    let requeue = requeue.clone();
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        if let Some(queue) = requeue.upgrade() {
            Sender { queue }.send(outgoing);
        }
        drop(permit);
    });
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
fn tls_config() -> rustls::ClientConfig {
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
