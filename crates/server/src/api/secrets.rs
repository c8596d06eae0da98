//! `/v1/secrets`: set, list and delete the caller's tenant's secrets. No response ever
//! carries a value.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_store::SecretMeta;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::ctx::Ctx;
use crate::ops::secrets;
use crate::secrets::SecretValue;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
#[schema(as = SetSecret)]
pub struct SetBody {
    /// `[a-z0-9][a-z0-9_-]{0,62}`.
    name: String,
    /// 1 to 8192 bytes of visible ASCII (inner spaces and tabs allowed): it is sent as an
    /// HTTP header value.
    #[schema(value_type = String)]
    value: SecretValue,
}

/// A secret as the API shows it: never its value.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretView {
    pub name: String,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretListView {
    /// Sorted by name.
    pub secrets: Vec<SecretView>,
}

impl From<SecretMeta> for SecretView {
    fn from(m: SecretMeta) -> Self {
        SecretView {
            name: m.name,
            created_at: m.created_at.format(&Rfc3339).unwrap_or_default(),
            updated_at: m.updated_at.format(&Rfc3339).unwrap_or_default(),
        }
    }
}

#[utoipa::path(post, path = "/v1/secrets", tag = "secrets", operation_id = "set_secret", summary = "Set a secret (create or replace); the value is never returned", request_body = SetBody, responses((status = 201, description = "created", body = SecretView), (status = 200, description = "replaced", body = SecretView), (status = 400, description = "invalid name or value", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn set(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    ApiJson(body): ApiJson<SetBody>,
) -> Result<Response, ApiError> {
    let put = secrets::set(&ctx, &who.tenant_id, &body.name, &body.value)?;
    let status = if put.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(SecretView::from(put.meta))).into_response())
}

#[utoipa::path(get, path = "/v1/secrets", tag = "secrets", operation_id = "list_secrets", summary = "List your secrets (names and times, never values)", responses((status = 200, body = SecretListView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
) -> Result<Json<SecretListView>, ApiError> {
    let secrets = secrets::list(&ctx, &who.tenant_id)?;
    Ok(Json(SecretListView {
        secrets: secrets.into_iter().map(SecretView::from).collect(),
    }))
}

#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "secrets", operation_id = "delete_secret", summary = "Delete a secret", params(("name" = String, Path, description = "the secret's name")), responses((status = 204, description = "deleted"), (status = 400, description = "invalid name", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such secret", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn delete(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    secrets::delete(&ctx, &who.tenant_id, &name)?;
    Ok(StatusCode::NO_CONTENT)
}
