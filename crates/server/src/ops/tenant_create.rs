//! `POST /v1/tenants` (admin): a new tenant, its quota and its first API key.

use berth_store::{QuotaChange, StoreError, Tenant};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::validate;

/// A new tenant with the plaintext of its key (shown once, stored hashed).
#[derive(Debug)]
pub struct NewTenant {
    pub tenant: Tenant,
    pub api_key: String,
}

pub fn create_tenant(ctx: &Ctx, name: &str, quota: &QuotaChange) -> Result<NewTenant, OpError> {
    validate::tenant_name(name)?;
    let taken = || OpError::TenantNameTaken {
        name: name.to_owned(),
    };
    if ctx.store.tenant_by_name(name)?.is_some() {
        return Err(taken());
    }
    let tenant = match ctx.store.create_tenant(name) {
        Ok(tenant) => tenant,
        // A concurrent create of the same name won the UNIQUE constraint.
        Err(e @ StoreError::Database { .. }) => {
            return match ctx.store.tenant_by_name(name)? {
                Some(_) => Err(taken()),
                None => Err(e.into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    // Before its key exists: nothing can act for the tenant without its limits.
    ctx.store.set_quota(&tenant.id, quota)?;
    let api_key = ctx.store.create_api_key(&tenant.id, false)?;
    tracing::info!(tenant_id = %tenant.id, name = %tenant.name, "tenant created");
    Ok(NewTenant { tenant, api_key })
}
