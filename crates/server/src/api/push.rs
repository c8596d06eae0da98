//! Web Push: the daemon's VAPID public key (`GET /v1/web/push/key`) and a tenant's browser
//! subscriptions (`POST/GET /v1/web/push/subscriptions`, `DELETE …/{id}`).

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_store::push_subscriptions::PushSubscription;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::ctx::Ctx;
use crate::push::subscriptions::{self, endpoint_host, Subscription};

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PushKeyView {
    /// The daemon's VAPID key, base64url (uncompressed P-256 point): the browser's
    /// `applicationServerKey`.
    public_key: String,
}

/// What `PushSubscription.toJSON()` gives in a browser.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreatePushSubscription)]
pub struct SubscribeBody {
    /// The push service's URL for this browser: `https://` on a known push service
    /// (FCM, Mozilla, Windows, Apple) unless berth.toml `[push] allow_endpoints` allows it.
    endpoint: String,
    /// Ignored (the push service says when a subscription is gone).
    #[serde(default, rename = "expirationTime")]
    #[schema(value_type = Option<f64>)]
    _expiration_time: Option<serde_json::Value>,
    keys: SubscriptionKeys,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriptionKeys {
    /// The browser's P-256 key, base64url (65 bytes uncompressed).
    p256dh: String,
    /// The browser's auth secret, base64url (16 bytes).
    auth: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PushSubscriptionView {
    /// `ps_…`
    id: String,
    /// The push service's host (the endpoint itself is never shown again: whoever has it
    /// can push to the browser).
    endpoint_host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    created_at: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PushSubscriptionList {
    subscriptions: Vec<PushSubscriptionView>,
}

#[utoipa::path(get, path = "/v1/web/push/key", tag = "push", summary = "The daemon's VAPID public key (applicationServerKey)", responses((status = 200, body = PushKeyView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn key(State(ctx): State<Ctx>, Caller(_who): Caller) -> Json<PushKeyView> {
    Json(PushKeyView {
        public_key: ctx.push.vapid.public_key_b64(),
    })
}

#[utoipa::path(post, path = "/v1/web/push/subscriptions", tag = "push", summary = "Subscribe a browser to the tenant's notifications (the same endpoint again: the same id)", request_body = SubscribeBody, responses((status = 201, body = PushSubscriptionView), (status = 400, description = "an endpoint that is not a known push service, or bad keys (`invalid_request`)", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 409, description = "the tenant has 20 subscriptions (`conflict`)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn subscribe(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    ApiJson(body): ApiJson<SubscribeBody>,
) -> Result<Response, ApiError> {
    // The same endpoint again answers the same way (its id, keys updated): a browser
    // re-subscribing after a reload need not know it had.
    let (row, _new) = subscriptions::subscribe(
        &ctx,
        &who.tenant_id,
        Subscription {
            endpoint: &body.endpoint,
            p256dh: &body.keys.p256dh,
            auth: &body.keys.auth,
        },
    )?;
    let mut view = view(&row);
    view.created_at = None;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[utoipa::path(get, path = "/v1/web/push/subscriptions", tag = "push", summary = "The tenant's push subscriptions", responses((status = 200, body = PushSubscriptionList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
) -> Result<Json<PushSubscriptionList>, ApiError> {
    let rows = subscriptions::list(&ctx, &who.tenant_id)?;
    Ok(Json(PushSubscriptionList {
        subscriptions: rows.iter().map(view).collect(),
    }))
}

#[utoipa::path(delete, path = "/v1/web/push/subscriptions/{id}", tag = "push", summary = "Unsubscribe a browser", params(("id" = String, Path, description = "`ps_…`")), responses((status = 204, description = "deleted"), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such subscription", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn unsubscribe(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    subscriptions::unsubscribe(&ctx, &who.tenant_id, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

fn view(row: &PushSubscription) -> PushSubscriptionView {
    PushSubscriptionView {
        id: row.id.clone(),
        endpoint_host: endpoint_host(&row.endpoint),
        created_at: Some(row.created_at.format(&Rfc3339).unwrap_or_default()),
    }
}
