//! One push delivered: encrypted for its subscription (RFC 8291), signed with VAPID (RFC
//! 8292) and POSTed to the push service (RFC 8030) on a connection of its own, all within
//! [`TIMEOUT`]. A push service that says the subscription is gone (404, 410) has it
//! deleted; the verdict tells the sender whether the service itself is failing.

use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use berth_runtime::error_chain;
use berth_store::Store;
use bytes::Bytes;
use http::{header, StatusCode};
use http_body_util::Full;

use super::config::PushHostConfig;
use super::encrypt::{self, EncryptError};
use super::endpoint::{self, EndpointRefused};
use super::outgoing::Outgoing;
use super::vapid::{VapidError, VapidKey};
use crate::outbound::{self, OutboundError};

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
        let sent = self.post(outgoing).await;
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
                    SendError::Outbound(
                        OutboundError::Timeout(_)
                        | OutboundError::Connect { .. }
                        | OutboundError::Http(_),
                    ) => Verdict::Failing { retry_after: None },
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
            .header(header::AUTHORIZATION, authorization)
            .header(header::CONTENT_ENCODING, "aes128gcm")
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header(header::CONTENT_LENGTH, body.len())
            .header("ttl", TTL_S)
            .header("urgency", "normal")
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| SendError::Request)?;
        let (status, headers) = outbound::post(&endpoint, &self.tls, request, TIMEOUT).await?;
        Ok((status, retry_after(&headers)))
    }
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
    #[error("the push service gave no answer")]
    Outbound(#[from] OutboundError),
}
