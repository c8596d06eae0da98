//! Subscribing, listing and unsubscribing a tenant's browsers: the typed operations behind
//! `/v1/web/push/subscriptions`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use berth_protocol::TenantId;
use berth_store::push_subscriptions::{NewPushSubscription, PushSubscription, Subscribed};

use super::{encrypt, endpoint, PushError, MAX_SUBSCRIPTIONS_PER_TENANT};
use crate::ctx::Ctx;
use crate::error::OpError;

/// What `PushSubscription.toJSON()` gives, as the handler parsed it.
#[derive(Debug, Clone, Copy)]
pub struct Subscription<'a> {
    pub endpoint: &'a str,
    pub p256dh: &'a str,
    pub auth: &'a str,
}

/// Subscribes (or re-subscribes) a browser; the row, and whether it is new.
pub fn subscribe(
    ctx: &Ctx,
    tenant: &TenantId,
    sub: Subscription<'_>,
) -> Result<(PushSubscription, bool), OpError> {
    endpoint::check(sub.endpoint, &ctx.push.config).map_err(PushError::from)?;
    // Stored unpadded, as the sender decodes them.
    let (p256dh, auth) = (
        sub.p256dh.trim_end_matches('='),
        sub.auth.trim_end_matches('='),
    );
    check_keys(p256dh, auth)?;
    let new = NewPushSubscription {
        endpoint: sub.endpoint,
        p256dh,
        auth,
    };
    match ctx
        .store
        .add_push_subscription(tenant, new, MAX_SUBSCRIPTIONS_PER_TENANT)?
    {
        Subscribed::Added(row) => Ok((row, true)),
        Subscribed::Existing(row) => Ok((row, false)),
        Subscribed::LimitReached { max } => Err(PushError::TooMany { max }.into()),
    }
}

pub fn list(ctx: &Ctx, tenant: &TenantId) -> Result<Vec<PushSubscription>, OpError> {
    Ok(ctx.store.list_push_subscriptions(tenant)?)
}

pub fn unsubscribe(ctx: &Ctx, tenant: &TenantId, id: &str) -> Result<(), OpError> {
    if ctx.store.delete_push_subscription(tenant, id)? {
        Ok(())
    } else {
        Err(PushError::NotFound { id: id.to_owned() }.into())
    }
}

/// The endpoint's host, which listings show instead of the endpoint (a capability URL:
/// whoever has it can push to the browser).
pub fn endpoint_host(endpoint: &str) -> String {
    endpoint
        .parse::<http::Uri>()
        .ok()
        .and_then(|uri| uri.host().map(str::to_ascii_lowercase))
        .unwrap_or_default()
}

/// RFC 8291's keys: `p256dh` a P-256 point (65 bytes uncompressed), `auth` 16 bytes, both
/// base64url without padding (what browsers send).
fn check_keys(p256dh: &str, auth: &str) -> Result<(), PushError> {
    let invalid = |field, rule| PushError::InvalidKey { field, rule };
    let point = URL_SAFE_NO_PAD
        .decode(p256dh)
        .map_err(|_| invalid("p256dh", "must be base64url"))?;
    if point.len() != 65 || point[0] != 4 {
        return Err(invalid(
            "p256dh",
            "must be an uncompressed P-256 point (65 bytes, starting 0x04)",
        ));
    }
    if !encrypt::is_valid_peer_key(&point) {
        return Err(invalid("p256dh", "is not a point on P-256"));
    }
    let secret = URL_SAFE_NO_PAD
        .decode(auth)
        .map_err(|_| invalid("auth", "must be base64url"))?;
    if secret.len() != 16 {
        return Err(invalid("auth", "must be 16 bytes"));
    }
    Ok(())
}
