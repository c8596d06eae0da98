//! `POST /sandboxes/{id}/pause`: a running sandbox is paused with its processes kept in
//! memory (berth's pause), or, with `memory: false`, stopped with only its disk kept. A
//! paused sandbox has no deadline (E2B keeps it until it is killed) until `connect` brings
//! it back.

use berth_protocol::TenantId;

use crate::ctx::Ctx;
use crate::e2b::error::E2bError;
use crate::e2b::lookup::find;
use crate::e2b::view::state;
use crate::e2b::wire::SandboxState;

pub async fn pause(
    ctx: &Ctx,
    tenant: &TenantId,
    sandbox_id: &str,
    memory: bool,
) -> Result<(), E2bError> {
    let (record, _) = find(ctx, tenant, sandbox_id)?;
    if state(&record) == SandboxState::Paused {
        return Err(E2bError::AlreadyPaused {
            sandbox_id: sandbox_id.to_owned(),
        });
    }
    if memory {
        if !ctx.runtimes.capabilities(&record.runtime).pause {
            return Err(E2bError::CannotPause {
                runtime: record.runtime,
            });
        }
        ctx.lifecycle().pause(&record.id).await?;
    } else {
        ctx.lifecycle().stop(&record.id).await?;
    }
    ctx.store.disarm_e2b_timeout(&record.id)?;
    ctx.e2b.deadline_moved();
    tracing::info!(box_id = %record.id, sandbox_id, memory, "E2B sandbox paused");
    Ok(())
}
