//! `POST /sandboxes/{id}/timeout`: the running sandbox ends `timeout` seconds from now
//! (sooner or later than before: each call starts the count again), killed or paused as
//! it was made to be.

use berth_protocol::TenantId;

use crate::ctx::Ctx;
use crate::e2b::create::timeout;
use crate::e2b::error::E2bError;
use crate::e2b::lookup::find;
use crate::e2b::now_ms;
use crate::e2b::view::state;
use crate::e2b::wire::SandboxState;

pub fn set_timeout(
    ctx: &Ctx,
    tenant: &TenantId,
    sandbox_id: &str,
    timeout_s: i64,
) -> Result<(), E2bError> {
    let timeout_s = timeout("timeout", timeout_s)?;
    let (record, _) = find(ctx, tenant, sandbox_id)?;
    if state(&record) == SandboxState::Paused {
        return Err(E2bError::Paused {
            sandbox_id: sandbox_id.to_owned(),
        });
    }
    let end_at_ms = now_ms() + timeout_s * 1000;
    if !ctx.store.set_e2b_timeout(&record.id, end_at_ms, true)? {
        return Err(E2bError::SandboxNotFound {
            sandbox_id: sandbox_id.to_owned(),
        });
    }
    ctx.e2b.deadline_moved();
    Ok(())
}
