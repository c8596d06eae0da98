//! Webhooks (`/v1/webhooks`): a tenant's endpoints for its boxes' events, their test
//! delivery and their deliveries' last attempts (docs/webhooks.md).

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_store::webhooks::{Delivery, Webhook};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::ctx::Ctx;
use crate::webhooks::registry::{self, NewWebhook};

/// Deliveries a page lists by default, and at most.
const DELIVERIES_DEFAULT: u32 = 50;
const DELIVERIES_MAX: u32 = 500;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where deliveries are POSTed: `https://`, not to a private address, unless berth.toml
    /// `[webhooks] allow_endpoints` lists its origin.
    url: String,
    /// What it is told of: `box.state_changed`, `box.failed`, `turn.completed`,
    /// `wakeup.fired`, `process.exited`.
    events: Vec<String>,
    /// A note of the tenant's own (at most 256 characters).
    #[serde(default)]
    description: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookView {
    /// `wh_…`
    id: String,
    url: String,
    events: Vec<String>,
    description: String,
    created_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedWebhook {
    #[serde(flatten)]
    webhook: WebhookView,
    /// The signing secret (`whsec_…`, Standard Webhooks): shown only now.
    secret: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookList {
    webhooks: Vec<WebhookView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryView {
    /// `msg_…`: the `webhook-id` header of every attempt.
    id: String,
    event: String,
    /// `pending` (attempted again at `next_attempt_at`), `delivered` (answered 2xx) or
    /// `failed` (given up: a day of attempts, or refused before any).
    state: String,
    attempts: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    next_attempt_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    last_attempt_at: Option<String>,
    /// The HTTP status of the last attempt, when it was answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_status: Option<u16>,
    /// Why the last attempt did not count as delivered.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    created_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DeliveryList {
    deliveries: Vec<DeliveryView>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct DeliveriesQuery {
    /// How many, newest first (default 50, at most 500).
    limit: Option<u32>,
}

#[utoipa::path(post, path = "/v1/webhooks", tag = "webhooks", summary = "Add a webhook (its signing secret is in this answer only)", request_body = CreateWebhook, responses((status = 201, body = CreatedWebhook), (status = 400, description = "a URL that is not https or is private, an unknown event (`invalid_request`)", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 409, description = "the tenant has 20 webhooks (`conflict`)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn create(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    ApiJson(body): ApiJson<CreateWebhook>,
) -> Result<Response, ApiError> {
    let new = NewWebhook {
        url: body.url,
        events: body.events,
        description: body.description,
    };
    let (webhook, secret) = registry::add(&ctx, &who.tenant_id, new)?;
    let created = CreatedWebhook {
        webhook: view(&webhook),
        secret,
    };
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

#[utoipa::path(get, path = "/v1/webhooks", tag = "webhooks", summary = "The tenant's webhooks", responses((status = 200, body = WebhookList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
) -> Result<Json<WebhookList>, ApiError> {
    let webhooks = registry::list(&ctx, &who.tenant_id)?;
    Ok(Json(WebhookList {
        webhooks: webhooks.iter().map(view).collect(),
    }))
}

#[utoipa::path(get, path = "/v1/webhooks/{id}", tag = "webhooks", summary = "One webhook", params(("id" = String, Path, description = "`wh_…`")), responses((status = 200, body = WebhookView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such webhook", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn show(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(id): Path<String>,
) -> Result<Json<WebhookView>, ApiError> {
    Ok(Json(view(&registry::get(&ctx, &who.tenant_id, &id)?)))
}

#[utoipa::path(delete, path = "/v1/webhooks/{id}", tag = "webhooks", summary = "Delete a webhook and its deliveries", params(("id" = String, Path, description = "`wh_…`")), responses((status = 204, description = "deleted"), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such webhook", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn delete(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    registry::delete(&ctx, &who.tenant_id, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/webhooks/{id}/test", tag = "webhooks", summary = "Send a `webhook.test` event and answer with its first attempt", params(("id" = String, Path, description = "`wh_…`")), responses((status = 200, description = "the delivery after its first attempt (or still pending when it took longer than the attempt timeout)", body = DeliveryView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such webhook", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn test(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(id): Path<String>,
) -> Result<Json<DeliveryView>, ApiError> {
    let delivery = registry::test(&ctx, &who.tenant_id, &id).await?;
    Ok(Json(delivery_view(&delivery)))
}

#[utoipa::path(get, path = "/v1/webhooks/{id}/deliveries", tag = "webhooks", summary = "A webhook's deliveries and their last attempts, newest first", params(("id" = String, Path, description = "`wh_…`"), DeliveriesQuery), responses((status = 200, body = DeliveryList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such webhook", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn deliveries(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(id): Path<String>,
    Query(query): Query<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let limit = query
        .limit
        .unwrap_or(DELIVERIES_DEFAULT)
        .clamp(1, DELIVERIES_MAX);
    let rows = registry::deliveries(&ctx, &who.tenant_id, &id, limit)?;
    Ok(Json(DeliveryList {
        deliveries: rows.iter().map(delivery_view).collect(),
    }))
}

fn view(webhook: &Webhook) -> WebhookView {
    WebhookView {
        id: webhook.id.clone(),
        url: webhook.url.clone(),
        events: webhook.events.clone(),
        description: webhook.description.clone(),
        created_at: rfc3339(webhook.created_at),
    }
}

fn delivery_view(d: &Delivery) -> DeliveryView {
    let pending = d.state == berth_store::webhooks::DeliveryState::Pending;
    DeliveryView {
        id: d.id.clone(),
        event: d.event.clone(),
        state: d.state.as_str().to_owned(),
        attempts: d.attempts,
        next_attempt_at: pending
            .then(|| {
                OffsetDateTime::from_unix_timestamp_nanos(i128::from(d.next_attempt_ms) * 1_000_000)
                    .ok()
                    .map(rfc3339)
            })
            .flatten(),
        last_attempt_at: d.last_attempt_at.map(rfc3339),
        last_status: d.last_status,
        last_error: d.last_error.clone(),
        created_at: rfc3339(d.created_at),
    }
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}
