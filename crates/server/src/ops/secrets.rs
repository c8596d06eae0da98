//! `POST/GET /v1/secrets`, `DELETE /v1/secrets/{name}`: the caller's tenant's secrets.
//! Values go in and never come out here; only the gateway reveals them.

use berth_protocol::TenantId;
use berth_store::{PutSecret, SecretMeta};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::secrets::SecretValue;

/// Creates or replaces `name` for `tenant`.
pub fn set(
    ctx: &Ctx,
    tenant: &TenantId,
    name: &str,
    value: &SecretValue,
) -> Result<PutSecret, OpError> {
    let put = ctx.secrets.set(tenant, name, value)?;
    tracing::info!(tenant_id = %tenant, name, created = put.created, "secret set");
    Ok(put)
}

pub fn list(ctx: &Ctx, tenant: &TenantId) -> Result<Vec<SecretMeta>, OpError> {
    Ok(ctx.secrets.list(tenant)?)
}

pub fn delete(ctx: &Ctx, tenant: &TenantId, name: &str) -> Result<(), OpError> {
    ctx.secrets.delete(tenant, name)?;
    tracing::info!(tenant_id = %tenant, name, "secret deleted");
    Ok(())
}
