//! `POST /v1/tenants` (admin).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::ctx::Ctx;
use crate::ops::tenant_create;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
#[schema(as = CreateTenant)]
pub struct CreateBody {
    name: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantView {
    pub id: String,
    pub name: String,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedView {
    pub tenant: TenantView,
    pub api_key: String,
}

#[utoipa::path(post, path = "/v1/tenants", tag = "tenants", summary = "Create a tenant and its API key (admin)", request_body = CreateBody, responses((status = 201, body = CreatedView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "not an admin key", body = berth_protocol::ErrorBody), (status = 409, description = "a tenant of that name exists", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn create(
    State(ctx): State<Ctx>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let created = tenant_create::create_tenant(&ctx, &body.name)?;
    let view = CreatedView {
        tenant: TenantView {
            id: created.tenant.id.to_string(),
            name: created.tenant.name,
        },
        api_key: created.api_key,
    };
    Ok((StatusCode::CREATED, Json(view)).into_response())
}
