//! A tenant's API keys: `/v1/tenants/{ref}/keys` (the admin for any tenant, a tenant for
//! its own). Rotation is an add, then a revoke of the old key once nothing uses it.

use berth_store::{ApiKeyMeta, NewApiKey, Principal, Tenant};

use crate::ctx::Ctx;
use crate::error::OpError;

/// A new key for `tenant`; only an admin may make an admin key.
pub fn add_key(
    ctx: &Ctx,
    who: &Principal,
    tenant: &Tenant,
    admin: bool,
) -> Result<NewApiKey, OpError> {
    if admin && !who.is_admin {
        return Err(OpError::AdminKeyRequired);
    }
    let key = ctx.store.add_api_key(&tenant.id, admin)?;
    tracing::info!(tenant_id = %tenant.id, key_id = %key.meta.id, admin, "API key added");
    Ok(key)
}

pub fn list_keys(ctx: &Ctx, tenant: &Tenant) -> Result<Vec<ApiKeyMeta>, OpError> {
    Ok(ctx.store.list_api_keys(&tenant.id)?)
}

/// Revokes the key: the next request made with it is refused (401), and so is the next
/// from a browser it signed in, or from one of the tenant's whose origin berth never
/// recorded (signed in before it did). Answers how many browser sessions ended.
pub fn revoke_key(ctx: &Ctx, tenant: &Tenant, key_id: &str) -> Result<usize, OpError> {
    let ended = ctx.store.revoke_api_key(&tenant.id, key_id)?;
    tracing::info!(tenant_id = %tenant.id, key_id, web_sessions_ended = ended, "API key revoked");
    Ok(ended)
}
