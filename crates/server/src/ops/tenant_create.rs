//! `POST /v1/tenants` (admin): a new tenant and its first API key.

use berth_store::{StoreError, Tenant};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::validate;

/// A new tenant with the plaintext of its key (shown once, stored hashed).
#[derive(Debug)]
pub struct NewTenant {
    pub tenant: Tenant,
    pub api_key: String,
}

pub fn create_tenant(ctx: &Ctx, name: &str) -> Result<NewTenant, OpError> {
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
        Err(e @ StoreError::Sqlite { .. }) => {
            return match ctx.store.tenant_by_name(name)? {
                Some(_) => Err(taken()),
                None => Err(e.into()),
            };
        }
        Err(e) => return Err(e.into()),
    };
    let api_key = ctx.store.create_api_key(&tenant.id, false)?;
    tracing::info!(tenant_id = %tenant.id, name = %tenant.name, "tenant created");
    Ok(NewTenant { tenant, api_key })
}
