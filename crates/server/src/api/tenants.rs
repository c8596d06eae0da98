//! `/v1/tenants`: create, list, show and change tenants (quotas) — the admin; a tenant's
//! API keys — the admin for any tenant, a tenant for its own.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_store::{ApiKeyMeta, Quota, QuotaChange, TenantInfo, Usage};
use http::StatusCode;
use serde::{Deserialize, Deserializer, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, OptionalJson};
use crate::ctx::Ctx;
use crate::ops::{tenant_create, tenant_keys, tenant_update};

/// The header of a key's revocation (`204`, no body, as before): how many browser sessions
/// it ended (docs/api.md, "API keys").
pub const WEB_SESSIONS_ENDED: &str = "berth-web-sessions-ended";

/// A tenant's limits in a request: each absent keeps the limit, `null` clears it.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaBody {
    /// Boxes in any state.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>)]
    max_boxes: Option<Option<u64>>,
    /// Boxes that may have processes (starting, running, paused, stopping).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>)]
    max_running: Option<Option<u64>>,
    /// The sum of its boxes' memory limits.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>)]
    max_memory_mib: Option<Option<u64>>,
    /// The sum of its boxes' volume sizes (`disk_mib`, else their template's).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<u64>)]
    max_disk_mib: Option<Option<u64>>,
}

/// A field that is present (its value may be `null`) is `Some`; `default` makes an absent
/// one `None`.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<u64>>, D::Error> {
    Option::<u64>::deserialize(d).map(Some)
}

impl QuotaBody {
    fn change(&self) -> QuotaChange {
        QuotaChange {
            max_boxes: self.max_boxes,
            max_running: self.max_running,
            max_memory_mib: self.max_memory_mib,
            max_disk_mib: self.max_disk_mib,
        }
    }
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateTenant)]
pub struct CreateBody {
    name: String,
    /// The tenant's limits (as in `PATCH /v1/tenants/{tenant}`); absent or `null`: none.
    #[serde(default)]
    max_boxes: Option<u64>,
    #[serde(default)]
    max_running: Option<u64>,
    #[serde(default)]
    max_memory_mib: Option<u64>,
    #[serde(default)]
    max_disk_mib: Option<u64>,
}

impl CreateBody {
    fn quota(&self) -> QuotaChange {
        QuotaChange {
            max_boxes: Some(self.max_boxes),
            max_running: Some(self.max_running),
            max_memory_mib: Some(self.max_memory_mib),
            max_disk_mib: Some(self.max_disk_mib),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantView {
    pub id: String,
    pub name: String,
    pub created_at: String,
    /// Its limits; `null`: no limit.
    #[schema(value_type = Object)]
    pub quota: Quota,
    /// What it uses of them now.
    #[schema(value_type = Object)]
    pub usage: Usage,
}

impl From<TenantInfo> for TenantView {
    fn from(info: TenantInfo) -> Self {
        TenantView {
            id: info.tenant.id.to_string(),
            name: info.tenant.name,
            created_at: info.created_at.format(&Rfc3339).unwrap_or_default(),
            quota: info.quota,
            usage: info.usage,
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TenantListView {
    pub tenants: Vec<TenantView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CreatedView {
    pub tenant: TenantView,
    /// Shown only this once; berth keeps its hash.
    pub api_key: String,
}

#[utoipa::path(post, path = "/v1/tenants", tag = "tenants", summary = "Create a tenant, its quota and its API key (admin)", request_body = CreateBody, responses((status = 201, body = CreatedView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "not an admin key", body = berth_protocol::ErrorBody), (status = 409, description = "a tenant of that name exists", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn create(
    State(ctx): State<Ctx>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<Response, ApiError> {
    caller.require_admin()?;
    let created = tenant_create::create_tenant(&ctx, &body.name, &body.quota())?;
    let view = CreatedView {
        tenant: tenant_update::tenant_info(&ctx, &created.tenant)?.into(),
        api_key: created.api_key,
    };
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[utoipa::path(get, path = "/v1/tenants", tag = "tenants", summary = "List tenants with their quotas and usage (admin)", responses((status = 200, body = TenantListView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "not an admin key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    caller: Caller,
) -> Result<Json<TenantListView>, ApiError> {
    caller.require_admin()?;
    let tenants = tenant_update::list_tenants(&ctx)?;
    Ok(Json(TenantListView {
        tenants: tenants.into_iter().map(TenantView::from).collect(),
    }))
}

#[utoipa::path(get, path = "/v1/tenants/{tenant}", tag = "tenants", summary = "Show a tenant, its quota and usage (admin, or the tenant itself)", params(("tenant" = String, Path, description = "tenant id (`tn_…`) or name")), responses((status = 200, body = TenantView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such tenant (or not yours)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn get(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<TenantView>, ApiError> {
    let tenant = tenant_update::find_tenant(&ctx, &who, &reference)?;
    Ok(Json(tenant_update::tenant_info(&ctx, &tenant)?.into()))
}

#[utoipa::path(patch, path = "/v1/tenants/{tenant}", tag = "tenants", summary = "Change a tenant's quota (admin); `null` clears a limit", params(("tenant" = String, Path, description = "tenant id (`tn_…`) or name")), request_body = QuotaBody, responses((status = 200, body = TenantView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "not an admin key", body = berth_protocol::ErrorBody), (status = 404, description = "no such tenant", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn update(
    State(ctx): State<Ctx>,
    caller: Caller,
    Path(reference): Path<String>,
    ApiJson(body): ApiJson<QuotaBody>,
) -> Result<Json<TenantView>, ApiError> {
    let who = caller.require_admin()?;
    let tenant = tenant_update::find_tenant(&ctx, who, &reference)?;
    let info = tenant_update::update_quota(&ctx, &tenant, &body.change())?;
    Ok(Json(info.into()))
}

/// One API key as listings show it (never the key).
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyView {
    /// `key_…`: names the key in `DELETE /v1/tenants/{tenant}/keys/{key_id}`.
    pub id: String,
    /// The key's first characters (`berth_` and 8 hex); `null` for keys older than this.
    pub prefix: Option<String>,
    pub admin: bool,
    pub created_at: String,
    /// To the minute; `null`: never used.
    pub last_used_at: Option<String>,
}

impl From<ApiKeyMeta> for KeyView {
    fn from(k: ApiKeyMeta) -> Self {
        KeyView {
            id: k.id,
            prefix: k.prefix,
            admin: k.is_admin,
            created_at: k.created_at.format(&Rfc3339).unwrap_or_default(),
            last_used_at: k.last_used_at.and_then(|t| t.format(&Rfc3339).ok()),
        }
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyListView {
    pub keys: Vec<KeyView>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct NewKeyView {
    pub key: KeyView,
    /// Shown only this once; berth keeps its hash.
    pub api_key: String,
}

/// `POST /v1/tenants/{tenant}/keys`'s optional body.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddKeyBody {
    /// An admin key (only an admin may make one).
    #[serde(default)]
    admin: bool,
}

#[utoipa::path(get, path = "/v1/tenants/{tenant}/keys", tag = "tenants", summary = "List a tenant's API keys (admin, or the tenant itself)", params(("tenant" = String, Path, description = "tenant id (`tn_…`) or name")), responses((status = 200, body = KeyListView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such tenant (or not yours)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list_keys(
    State(ctx): State<Ctx>,
    caller: Caller,
    Path(reference): Path<String>,
) -> Result<Json<KeyListView>, ApiError> {
    let who = caller.require_api_key()?;
    let tenant = tenant_update::find_tenant(&ctx, who, &reference)?;
    let keys = tenant_keys::list_keys(&ctx, &tenant)?;
    Ok(Json(KeyListView {
        keys: keys.into_iter().map(KeyView::from).collect(),
    }))
}

#[utoipa::path(post, path = "/v1/tenants/{tenant}/keys", tag = "tenants", summary = "Add an API key (admin, or the tenant itself): rotation is an add, then a delete of the old key", params(("tenant" = String, Path, description = "tenant id (`tn_…`) or name")), request_body(content = AddKeyBody, description = "optional"), responses((status = 201, body = NewKeyView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "an admin key asked for by a tenant", body = berth_protocol::ErrorBody), (status = 404, description = "no such tenant (or not yours)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn add_key(
    State(ctx): State<Ctx>,
    caller: Caller,
    Path(reference): Path<String>,
    OptionalJson(body): OptionalJson<AddKeyBody>,
) -> Result<Response, ApiError> {
    let who = caller.require_api_key()?;
    let tenant = tenant_update::find_tenant(&ctx, who, &reference)?;
    let key = tenant_keys::add_key(&ctx, who, &tenant, body.admin)?;
    let view = NewKeyView {
        key: key.meta.into(),
        api_key: key.key,
    };
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[utoipa::path(delete, path = "/v1/tenants/{tenant}/keys/{key_id}", tag = "tenants", summary = "Revoke an API key at once (admin, or the tenant itself), and the browser sessions it opened", description = "Ends, in the same transaction, every web session signed in with this key, and every one of the tenant's whose origin berth never recorded (signed in before it did, so maybe with this key: those browsers sign in again).", params(("tenant" = String, Path, description = "tenant id (`tn_…`) or name"), ("key_id" = String, Path, description = "the key's id (`key_…`)")), responses((status = 204, description = "revoked", headers(("Berth-Web-Sessions-Ended" = u64, description = "how many browser sessions the revocation ended"))), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such tenant or key", body = berth_protocol::ErrorBody), (status = 409, description = "the last admin key", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn revoke_key(
    State(ctx): State<Ctx>,
    caller: Caller,
    Path((reference, key_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let who = caller.require_api_key()?;
    let tenant = tenant_update::find_tenant(&ctx, who, &reference)?;
    let ended = tenant_keys::revoke_key(&ctx, &tenant, &key_id)?;
    Ok((
        StatusCode::NO_CONTENT,
        [(WEB_SESSIONS_ENDED, ended.to_string())],
    )
        .into_response())
}
