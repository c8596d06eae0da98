//! A tenant's webhooks: added with a checked URL and a new signing secret (shown once,
//! kept sealed by the secret store), listed, deleted, and tried with a test delivery.

use std::net::IpAddr;
use std::time::Duration;

use berth_protocol::TenantId;
use berth_store::webhooks::{Delivery, NewDelivery, Webhook, WebhookAdded};
use serde_json::json;

use super::config::WebhooksHostConfig;
use super::events::{self, EVENT_NAMES};
use super::{signature, WebhookError, MAX_WEBHOOKS_PER_TENANT};
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::outbound::Endpoint;
use crate::secrets::SecretValue;

/// What a new webhook is.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub url: String,
    pub events: Vec<String>,
    pub description: String,
}

/// Checks a webhook URL: `https://` with a host that is not a private address, or an
/// origin `[webhooks] allow_endpoints` lists. Where a name resolves is checked at
/// every attempt.
pub fn check_url(url: &str, config: &WebhooksHostConfig) -> Result<Endpoint, WebhookError> {
    let refused = |why: &str| WebhookError::Url(format!("{url:?}: {why}"));
    let endpoint = Endpoint::parse(url, &config.allow_endpoints)
        .ok_or_else(|| refused("not an http(s) URL of at most 2048 bytes without user info"))?;
    if endpoint.allowed_by_config {
        return Ok(endpoint);
    }
    if !endpoint.https {
        return Err(refused(
            "must be https:// (an operator may allow an origin with [webhooks] allow_endpoints)",
        ));
    }
    if let Ok(ip) = endpoint.bare_host().parse::<IpAddr>() {
        if let Some(reason) = berth_egress::address::forbidden_reason(ip) {
            return Err(refused(&format!(
                "{ip} is {reason} (an operator may allow an origin with [webhooks] allow_endpoints)"
            )));
        }
    }
    Ok(endpoint)
}

/// Adds a webhook for `tenant`; the webhook and its secret (never shown again).
pub fn add(ctx: &Ctx, tenant: &TenantId, new: NewWebhook) -> Result<(Webhook, String), OpError> {
    check_url(&new.url, &ctx.webhooks.config)?;
    if new.description.chars().count() > 256 {
        return Err(WebhookError::Description.into());
    }
    let mut wanted: Vec<String> = Vec::new();
    for name in new.events {
        if !EVENT_NAMES.contains(&name.as_str()) {
            return Err(WebhookError::UnknownEvent { name }.into());
        }
        if !wanted.contains(&name) {
            wanted.push(name);
        }
    }
    if wanted.is_empty() {
        return Err(WebhookError::NoEvents.into());
    }
    let id = format!("wh_{}", berth_basics::hex(&random::<8>()?));
    let secret = signature::new_secret().map_err(OpError::Random)?;
    let (key_id, sealed) = ctx
        .secrets
        .seal_for(tenant, &id, &SecretValue::new(secret.clone()))
        .map_err(|e| OpError::Secret(Box::new(e)))?;
    let webhook = Webhook {
        id,
        tenant_id: tenant.clone(),
        url: new.url,
        events: wanted,
        description: new.description,
        key_id,
        nonce: sealed.nonce.to_vec(),
        ciphertext: sealed.ciphertext,
        created_at: now(),
    };
    match ctx.store.add_webhook(&webhook, MAX_WEBHOOKS_PER_TENANT)? {
        WebhookAdded::Added(webhook) => Ok((webhook, secret)),
        WebhookAdded::LimitReached { max } => Err(WebhookError::TooMany { max }.into()),
    }
}

pub fn list(ctx: &Ctx, tenant: &TenantId) -> Result<Vec<Webhook>, OpError> {
    Ok(ctx.store.list_webhooks(tenant)?)
}

pub fn get(ctx: &Ctx, tenant: &TenantId, id: &str) -> Result<Webhook, OpError> {
    ctx.store
        .get_webhook(Some(tenant), id)?
        .ok_or_else(|| WebhookError::NotFound { id: id.to_owned() }.into())
}

pub fn delete(ctx: &Ctx, tenant: &TenantId, id: &str) -> Result<(), OpError> {
    if ctx.store.delete_webhook(tenant, id)? {
        Ok(())
    } else {
        Err(WebhookError::NotFound { id: id.to_owned() }.into())
    }
}

/// The newest `limit` deliveries of the tenant's webhook `id`.
pub fn deliveries(
    ctx: &Ctx,
    tenant: &TenantId,
    id: &str,
    limit: u32,
) -> Result<Vec<Delivery>, OpError> {
    get(ctx, tenant, id)?;
    Ok(ctx.store.list_deliveries(tenant, id, limit)?)
}

/// Sends a `webhook.test` event to webhook `id` and waits for its first attempt (at
/// most the attempt's timeout and a little): the delivery as it then stands.
pub async fn test(ctx: &Ctx, tenant: &TenantId, id: &str) -> Result<Delivery, OpError> {
    let webhook = get(ctx, tenant, id)?;
    let delivery_id = new_delivery_id()?;
    let body = events::body(
        events::WEBHOOK_TEST,
        now(),
        json!({"webhook_id": webhook.id}),
    );
    let delivery = NewDelivery {
        id: delivery_id.clone(),
        webhook_id: webhook.id,
        tenant_id: tenant.clone(),
        event: events::WEBHOOK_TEST.to_owned(),
        payload: body,
        refused: None,
    };
    ctx.store.fan_out(&[], &[delivery])?;
    ctx.webhooks.ring();
    let within = Duration::from_secs(ctx.webhooks.config.timeout_s + 5);
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let now = ctx
            .store
            .get_delivery(tenant, &delivery_id)?
            .ok_or_else(|| WebhookError::NotFound { id: id.to_owned() })?;
        if now.attempts > 0 || tokio::time::Instant::now() >= deadline {
            return Ok(now);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) fn new_delivery_id() -> Result<String, OpError> {
    Ok(format!("msg_{}", berth_basics::hex(&random::<12>()?)))
}

fn random<const N: usize>() -> Result<[u8; N], OpError> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(OpError::Random)?;
    Ok(bytes)
}

fn now() -> time::OffsetDateTime {
    let now = time::OffsetDateTime::now_utc();
    now.replace_nanosecond(0).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_are_https_and_public_unless_allowed() {
        let config = WebhooksHostConfig {
            allow_endpoints: vec!["http://127.0.0.1:8099".to_owned()],
            ..WebhooksHostConfig::default()
        };
        for good in [
            "https://hooks.example/in",
            "https://hooks.example:8443/in?x=1",
            "https://93.184.216.34/in",
            "http://127.0.0.1:8099/in",
        ] {
            assert!(check_url(good, &config).is_ok(), "{good}");
        }
        for bad in [
            "http://hooks.example/in",
            "https://127.0.0.1/in",
            "https://10.1.2.3/in",
            "https://169.254.169.254/latest",
            "https://[::1]/in",
            "http://127.0.0.1:8098/in",
            "https://user@hooks.example/in",
            "ftp://hooks.example/in",
        ] {
            assert!(check_url(bad, &config).is_err(), "{bad}");
        }
    }
}
