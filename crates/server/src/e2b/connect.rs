//! Bringing a sandbox back: `connect` (v1 and v2) and the older `resume`.
//!
//! `connect` answers a running sandbox at once (200), and only ever extends its timeout
//! (`now + timeout` when that is later than its end); a paused one is resumed first (201),
//! its processes as they were, or cold-booted from its disk with `memory: false`. `resume`
//! is E2B's earlier form: a running sandbox is a conflict, and the timeout is set anew.

use berth_protocol::TenantId;
use berth_store::{BoxRecord, BoxState, E2bSandbox};

use crate::ctx::Ctx;
use crate::e2b::create::{services_started, timeout};
use crate::e2b::error::E2bError;
use crate::e2b::lookup::find;
use crate::e2b::now_ms;
use crate::e2b::view::state;
use crate::e2b::wire::SandboxState;

/// Whether the sandbox was running already or had to be resumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connected {
    WasRunning,
    Resumed,
}

/// `POST /sandboxes/{id}/connect`: the sandbox, running, with its timeout at least
/// `timeout_s` from now.
pub async fn connect(
    ctx: &Ctx,
    tenant: &TenantId,
    sandbox_id: &str,
    timeout_s: i64,
    memory: Option<bool>,
) -> Result<(Connected, BoxRecord, E2bSandbox), E2bError> {
    let timeout_s = timeout("timeout", timeout_s)?;
    let (record, _) = find(ctx, tenant, sandbox_id)?;
    let connected = match state(&record) {
        SandboxState::Running => Connected::WasRunning,
        SandboxState::Paused => {
            bring_back(ctx, &record, memory).await?;
            Connected::Resumed
        }
    };
    ctx.store
        .extend_e2b_timeout(&record.id, now_ms() + timeout_s * 1000)?;
    ctx.e2b.deadline_moved();
    let (record, row) = find(ctx, tenant, sandbox_id)?;
    Ok((connected, record, row))
}

/// `POST /sandboxes/{id}/resume`: the paused sandbox, running, its timeout `timeout_s`
/// from now.
pub async fn resume(
    ctx: &Ctx,
    tenant: &TenantId,
    sandbox_id: &str,
    timeout_s: i64,
    memory: Option<bool>,
) -> Result<(BoxRecord, E2bSandbox), E2bError> {
    let timeout_s = timeout("timeout", timeout_s)?;
    let (record, _) = find(ctx, tenant, sandbox_id)?;
    if state(&record) == SandboxState::Running {
        return Err(E2bError::AlreadyRunning {
            sandbox_id: sandbox_id.to_owned(),
        });
    }
    bring_back(ctx, &record, memory).await?;
    ctx.store
        .set_e2b_timeout(&record.id, now_ms() + timeout_s * 1000, true)?;
    ctx.e2b.deadline_moved();
    find(ctx, tenant, sandbox_id)
}

/// Wakes the paused box; `memory: false` drops what a pause kept in memory first, so the
/// box boots cold from its disk.
async fn bring_back(ctx: &Ctx, record: &BoxRecord, memory: Option<bool>) -> Result<(), E2bError> {
    let kept_in_memory = matches!(record.state, BoxState::Paused | BoxState::Snapshotted);
    if memory == Some(false) && kept_in_memory {
        ctx.lifecycle().stop(&record.id).await?;
    }
    ctx.lifecycle().resume(&record.id).await?;
    services_started(ctx, record).await;
    Ok(())
}
