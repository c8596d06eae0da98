//! Finding a sandbox: by its tenant (the control plane: another tenant's sandbox is "not
//! found", never "forbidden"), or on the whole host by its access token (the in-sandbox
//! API, which has no API key).

use berth_protocol::TenantId;
use berth_store::{BoxRecord, E2bSandbox};

use crate::ctx::Ctx;
use crate::e2b::access_token;
use crate::e2b::error::E2bError;
use crate::ops::box_find::name_in_span;

/// The tenant's sandbox `sandbox_id`, with its box.
pub fn find(
    ctx: &Ctx,
    tenant: &TenantId,
    sandbox_id: &str,
) -> Result<(BoxRecord, E2bSandbox), E2bError> {
    let not_found = || E2bError::SandboxNotFound {
        sandbox_id: sandbox_id.to_owned(),
    };
    let row = ctx
        .store
        .e2b_sandbox(tenant, sandbox_id)?
        .ok_or_else(not_found)?;
    let record = ctx.store.get_box(&row.box_id)?.ok_or_else(not_found)?;
    name_in_span(&record.id);
    Ok((record, row))
}

/// Sandbox `sandbox_id` when `access_token` is its token; `None` when there is no such
/// sandbox or the token is not its own (one answer for both, so a token-less caller learns
/// nothing of which sandboxes exist).
pub fn find_by_token(
    ctx: &Ctx,
    sandbox_id: &str,
    access_token: &str,
) -> Result<Option<(BoxRecord, E2bSandbox)>, E2bError> {
    let Some(row) = ctx.store.e2b_sandbox_on_host(sandbox_id)? else {
        return Ok(None);
    };
    if !access_token::check(ctx, &row.box_id, access_token) {
        return Ok(None);
    }
    let found = ctx.store.get_box(&row.box_id)?;
    if let Some(record) = &found {
        name_in_span(&record.id);
    }
    Ok(found.map(|record| (record, row)))
}
