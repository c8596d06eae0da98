//! The tenant a call acts for: the caller's own, or (an admin key only) one it names.

use berth_protocol::TenantId;
use berth_store::Principal;

use crate::ctx::Ctx;
use crate::error::OpError;

#[derive(Debug, thiserror::Error)]
pub enum TenantChoiceError {
    /// Only the admin names another tenant.
    #[error("only an admin key may act for another tenant")]
    OtherTenant,
    #[error(transparent)]
    Op(#[from] OpError),
}

/// `reference` (a tenant's name or id) when the caller may act for it; `None`: the
/// caller's own. A tenant learns nothing of the others, not even whether a name exists.
pub fn chosen(
    ctx: &Ctx,
    who: &Principal,
    reference: Option<&str>,
) -> Result<TenantId, TenantChoiceError> {
    let Some(reference) = reference else {
        return Ok(who.tenant_id.clone());
    };
    match ctx.store.find_tenant(reference).map_err(OpError::from)? {
        Some(t) if who.is_admin || t.id == who.tenant_id => Ok(t.id),
        _ if !who.is_admin => Err(TenantChoiceError::OtherTenant),
        _ => Err(OpError::TenantNotFound {
            reference: reference.to_owned(),
        }
        .into()),
    }
}
