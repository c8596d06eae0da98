//! Reading and changing tenants: `GET /v1/tenants` (admin), `GET /v1/tenants/{ref}` (admin,
//! or the tenant itself), `PATCH /v1/tenants/{ref}` (admin: its quota).

use berth_store::{Principal, QuotaChange, Tenant, TenantInfo};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_disk::template_disk_mib;

/// The tenant `reference` (id or name) names, if `who` may act on it: an admin on any
/// tenant, anyone else on its own only. Another tenant is "not found", as if it did not
/// exist.
pub fn find_tenant(ctx: &Ctx, who: &Principal, reference: &str) -> Result<Tenant, OpError> {
    let not_found = || OpError::TenantNotFound {
        reference: reference.to_owned(),
    };
    let tenant = ctx.store.find_tenant(reference)?.ok_or_else(not_found)?;
    if !who.is_admin && tenant.id != who.tenant_id {
        return Err(not_found());
    }
    Ok(tenant)
}

/// Every tenant with its quota and usage.
pub fn list_tenants(ctx: &Ctx) -> Result<Vec<TenantInfo>, OpError> {
    Ok(ctx
        .store
        .list_tenants(&|name| template_disk_mib(ctx, name))?)
}

/// One tenant with its quota and usage.
pub fn tenant_info(ctx: &Ctx, tenant: &Tenant) -> Result<TenantInfo, OpError> {
    list_tenants(ctx)?
        .into_iter()
        .find(|info| info.tenant.id == tenant.id)
        .ok_or_else(|| OpError::TenantNotFound {
            reference: tenant.name.clone(),
        })
}

/// Changes the tenant's limits. A limit below what it uses now refuses only what would
/// take more: nothing running is stopped, nothing is deleted.
pub fn update_quota(
    ctx: &Ctx,
    tenant: &Tenant,
    change: &QuotaChange,
) -> Result<TenantInfo, OpError> {
    let quota = ctx.store.set_quota(&tenant.id, change)?;
    tracing::info!(tenant_id = %tenant.id, name = %tenant.name, ?quota, "tenant quota changed");
    tenant_info(ctx, tenant)
}
