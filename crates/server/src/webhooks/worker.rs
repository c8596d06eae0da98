//! The one task that turns queued box events into deliveries and attempts them: at most
//! `[webhooks] max_in_flight_per_tenant` at once per tenant, each on a connection of its
//! own within `timeout_s`, signed, its redirect never followed, and retried after
//! `first_retry_s`, doubling up to `max_retry_s`, until it is `retry_for_s` old.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use berth_protocol::TenantId;
use berth_runtime::error_chain;
use berth_store::webhooks::{unix_ms, Attempt, Delivery, NewDelivery, Webhook};
use bytes::Bytes;
use http::header;
use http_body_util::Full;
use time::OffsetDateTime;
use tokio::task::JoinSet;

use super::config::WebhooksHostConfig;
use super::registry::{check_url, new_delivery_id};
use super::{events, signature, MAX_PENDING_PER_WEBHOOK};
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::outbound;

/// Queued events fanned out per transaction.
const FAN_OUT_BATCH: u32 = 100;
/// Due deliveries looked at per round.
const DUE_BATCH: u32 = 256;
/// The longest the worker sleeps with nothing due (a missed doorbell costs this much).
const IDLE: Duration = Duration::from_secs(30);
/// The same on a cluster's API replica.
const CLUSTER_IDLE: Duration = Duration::from_secs(1);
/// Answered and given-up deliveries are listed this long.
const KEEP_DONE: time::Duration = time::Duration::days(7);

/// The events this process stores ring the worker's doorbell from then on (once per
/// process: a replica that takes the jobs lease again starts the worker again).
pub fn listen(ctx: &Ctx) {
    ctx.store.add_event_listener(ctx.webhooks.clone());
}

/// Starts the worker; it runs until aborted (the daemon's end, or a lost jobs lease).
pub fn spawn(ctx: Ctx) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(ctx))
}

async fn run(ctx: Ctx) {
    let mut attempts: JoinSet<(String, TenantId)> = JoinSet::new();
    let mut in_flight: HashSet<String> = HashSet::new();
    let mut per_tenant: HashMap<TenantId, usize> = HashMap::new();
    let mut pruned_at = tokio::time::Instant::now();
    loop {
        let doorbell = ctx.webhooks.doorbell.notified();
        let wait = match round(&ctx, &mut attempts, &mut in_flight, &mut per_tenant) {
            Ok(wait) => wait,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "webhooks: cannot read or write the store");
                Duration::from_secs(1)
            }
        };
        if pruned_at.elapsed() > Duration::from_secs(3600) {
            pruned_at = tokio::time::Instant::now();
            if let Err(e) = ctx
                .store
                .prune_deliveries(OffsetDateTime::now_utc() - KEEP_DONE)
            {
                tracing::warn!(error = %error_chain(&e), "webhooks: cannot prune old deliveries");
            }
        }
        tokio::select! {
            _ = doorbell => {}
            _ = tokio::time::sleep(wait) => {}
            Some(done) = attempts.join_next() => {
                if let Ok((id, tenant)) = done {
                    in_flight.remove(&id);
                    if let Some(n) = per_tenant.get_mut(&tenant) {
                        *n = n.saturating_sub(1);
                    }
                }
            }
        }
    }
}

/// Fans the queue out and starts what is due and allowed; how long until the next is due.
fn round(
    ctx: &Ctx,
    attempts: &mut JoinSet<(String, TenantId)>,
    in_flight: &mut HashSet<String>,
    per_tenant: &mut HashMap<TenantId, usize>,
) -> Result<Duration, OpError> {
    while fan_out(ctx)? {}
    let now_ms = unix_ms(OffsetDateTime::now_utc());
    let max = ctx.webhooks.config.max_in_flight_per_tenant;
    for delivery in ctx.store.due_deliveries(now_ms, DUE_BATCH)? {
        let running = per_tenant.entry(delivery.tenant_id.clone()).or_default();
        if in_flight.contains(&delivery.id) || *running >= max {
            continue;
        }
        *running += 1;
        in_flight.insert(delivery.id.clone());
        let ctx = ctx.clone();
        attempts.spawn(async move {
            attempt(&ctx, &delivery).await;
            (delivery.id, delivery.tenant_id)
        });
    }
    let next = ctx.store.next_delivery_due()?;
    // On an API replica the events are written by the nodes, whose appends ring no bell
    // here: the worker looks every second instead.
    let idle = match ctx.role.api() {
        Some(_) => CLUSTER_IDLE,
        None => IDLE,
    };
    Ok(match next {
        Some(ms) if ms > now_ms => Duration::from_millis((ms - now_ms) as u64).min(idle),
        // Due but held back: an attempt ending wakes the worker.
        Some(_) => idle,
        None => idle,
    })
}

/// Turns up to a batch of queued events into deliveries; whether there were any.
fn fan_out(ctx: &Ctx) -> Result<bool, OpError> {
    let queued = ctx.store.webhook_queue(FAN_OUT_BATCH)?;
    if queued.is_empty() {
        return Ok(false);
    }
    let mut hooks: HashMap<TenantId, Vec<Webhook>> = HashMap::new();
    let mut pending: HashMap<String, u64> = HashMap::new();
    let mut deliveries = Vec::new();
    for event in &queued {
        if !hooks.contains_key(&event.tenant_id) {
            let list = ctx.store.list_webhooks(&event.tenant_id)?;
            hooks.insert(event.tenant_id.clone(), list);
        }
        for (name, data) in events::from_box_event(event) {
            let body = events::body(name, event.created_at, data);
            for hook in &hooks[&event.tenant_id] {
                if !hook.events.iter().any(|e| e == name) {
                    continue;
                }
                let waiting = match pending.get_mut(&hook.id) {
                    Some(n) => n,
                    None => pending
                        .entry(hook.id.clone())
                        .or_insert(ctx.store.pending_deliveries(&hook.id)?),
                };
                let refused = (*waiting >= MAX_PENDING_PER_WEBHOOK).then(|| {
                    format!("not sent: {MAX_PENDING_PER_WEBHOOK} deliveries of this webhook were already waiting")
                });
                *waiting += 1;
                deliveries.push(NewDelivery {
                    id: new_delivery_id()?,
                    webhook_id: hook.id.clone(),
                    tenant_id: event.tenant_id.clone(),
                    event: name.to_owned(),
                    payload: body.clone(),
                    refused,
                });
            }
        }
    }
    let done: Vec<i64> = queued.iter().map(|q| q.id).collect();
    ctx.store.fan_out(&done, &deliveries)?;
    Ok(true)
}

/// One attempt of `delivery`, recorded.
async fn attempt(ctx: &Ctx, delivery: &Delivery) {
    let config = &ctx.webhooks.config;
    let (status, error, again) = match post(ctx, delivery).await {
        Ok(status) if status.is_success() => (Some(status.as_u16()), None, false),
        Ok(status) if status.is_redirection() => (
            Some(status.as_u16()),
            Some(format!(
                "answered {status}: redirects are not followed (register the URL it names)"
            )),
            true,
        ),
        Ok(status) => (
            Some(status.as_u16()),
            Some(format!("answered {status}")),
            true,
        ),
        Err(Failure::Final(why)) => (None, Some(why), false),
        Err(Failure::Again(why)) => (None, Some(why), true),
    };
    let retry = match (&error, again) {
        (None, _) => None,
        (Some(_), false) => Some(None),
        (Some(_), true) => Some(next_attempt(config, delivery, OffsetDateTime::now_utc())),
    };
    if let Some(why) = &error {
        tracing::info!(delivery = %delivery.id, webhook = %delivery.webhook_id, attempt = delivery.attempts + 1, error = %why, "webhook not delivered");
    }
    let record = Attempt {
        status,
        error,
        retry,
    };
    if let Err(e) = ctx.store.record_attempt(&delivery.id, &record) {
        tracing::warn!(delivery = %delivery.id, error = %error_chain(&e), "webhooks: cannot record an attempt");
    }
}

/// When to try again (unix ms), or `None`: the delivery's time is up.
fn next_attempt(
    config: &WebhooksHostConfig,
    delivery: &Delivery,
    now: OffsetDateTime,
) -> Option<i64> {
    let doublings = delivery.attempts.min(30);
    let wait_s = config
        .first_retry_s
        .saturating_mul(1u64 << doublings)
        .min(config.max_retry_s);
    let next = now + time::Duration::seconds(wait_s as i64);
    let give_up_at = delivery.created_at + time::Duration::seconds(config.retry_for_s as i64);
    (next <= give_up_at).then(|| unix_ms(next))
}

enum Failure {
    /// Not sent, and it would not be next time either (a value that does not open).
    Final(String),
    /// No answer: the receiver may be back later.
    Again(String),
}

async fn post(ctx: &Ctx, delivery: &Delivery) -> Result<http::StatusCode, Failure> {
    let webhook = ctx
        .store
        .get_webhook(None, &delivery.webhook_id)
        .map_err(|e| Failure::Again(error_chain(&e)))?
        .ok_or_else(|| Failure::Final("the webhook was deleted".to_owned()))?;
    // Checked again: `[webhooks] allow_endpoints` may have shrunk since it was added.
    let endpoint =
        check_url(&webhook.url, &ctx.webhooks.config).map_err(|e| Failure::Again(e.to_string()))?;
    let secret = ctx
        .secrets
        .open_for(
            &webhook.tenant_id,
            &webhook.id,
            &webhook.key_id,
            &webhook.nonce,
            &webhook.ciphertext,
        )
        .map_err(|e| Failure::Final(error_chain(&e)))?;
    let timestamp = OffsetDateTime::now_utc().unix_timestamp();
    let body = Bytes::from(delivery.payload.clone());
    let signature = signature::sign(secret.expose(), &delivery.id, timestamp, &body)
        .ok_or_else(|| Failure::Final("the stored signing secret is malformed".to_owned()))?;
    let request = http::Request::post(endpoint.path_and_query.as_str())
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::USER_AGENT,
            concat!("berth-webhooks/", env!("CARGO_PKG_VERSION")),
        )
        .header(header::CONTENT_LENGTH, body.len())
        .header("webhook-id", delivery.id.as_str())
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(Full::new(body))
        .map_err(|_| Failure::Final("cannot build the request".to_owned()))?;
    let within = Duration::from_secs(ctx.webhooks.config.timeout_s);
    outbound::post(&endpoint, &ctx.webhooks.tls, request, within)
        .await
        .map(|(status, _)| status)
        .map_err(|e| Failure::Again(error_chain(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_double_up_to_the_cap_and_stop_after_the_day() {
        let config = WebhooksHostConfig::default();
        let created = OffsetDateTime::UNIX_EPOCH;
        let mut delivery = Delivery {
            id: "msg_1".into(),
            webhook_id: "wh_1".into(),
            tenant_id: "tn_aaaaaaaaaaaaaaaaaaaa".parse().unwrap(),
            event: "box.failed".into(),
            payload: "{}".into(),
            state: berth_store::webhooks::DeliveryState::Pending,
            attempts: 0,
            next_attempt_ms: 0,
            last_attempt_at: None,
            last_status: None,
            last_error: None,
            created_at: created,
        };
        let waits: Vec<i64> = (0..14)
            .map(|n| {
                delivery.attempts = n;
                next_attempt(&config, &delivery, created).unwrap() / 1000
            })
            .collect();
        assert_eq!(&waits[..6], [5, 10, 20, 40, 80, 160]);
        assert_eq!(waits[13], 3600);
        let late = created + time::Duration::seconds(86_400 - 60);
        assert_eq!(next_attempt(&config, &delivery, late), None);
    }
}
