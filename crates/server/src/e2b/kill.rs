//! `DELETE /sandboxes/{id}`: the sandbox's box is deleted, volume and all, as
//! `berth box rm` does; its sandbox row goes with it.

use berth_protocol::TenantId;

use crate::ctx::Ctx;
use crate::e2b::error::E2bError;
use crate::e2b::lookup::find;
use crate::ops::box_delete;

pub async fn kill(ctx: &Ctx, tenant: &TenantId, sandbox_id: &str) -> Result<(), E2bError> {
    let (record, _) = find(ctx, tenant, sandbox_id)?;
    box_delete::delete_box(ctx, &record.id).await?;
    tracing::info!(box_id = %record.id, sandbox_id, "E2B sandbox killed");
    Ok(())
}
