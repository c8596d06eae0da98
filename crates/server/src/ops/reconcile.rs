//! Bringing the runtime in line with the store at daemon start, and stopping every box at
//! daemon shutdown. Boot tokens live only in memory, so no box survives a daemon restart:
//! each is stopped and wakes cold on its next call, with the same disk.

use std::collections::HashSet;

use berth_store::BoxState;

use crate::ctx::{Ctx, STOP_GRACE};
use crate::error::{error_chain, OpError};
use crate::ops::box_stop::stop_box;

/// At start: stop every box the store thinks may run, mark it `stopped` (or `failed` if
/// the runtime cannot stop it), and remove what the runtime holds for boxes with no row.
pub async fn reconcile(ctx: &Ctx) -> Result<(), OpError> {
    let records = ctx.store.list_all_boxes()?;
    for record in &records {
        if !record.state.may_have_processes() {
            continue;
        }
        let (to, reason) = match ctx.runtime.stop(&record.id, STOP_GRACE).await {
            Ok(()) => (BoxState::Stopped, None),
            Err(e) => {
                tracing::error!(box_id = %record.id, error = %error_chain(&e), "reconcile: cannot stop box");
                (
                    BoxState::Failed,
                    Some(format!(
                        "stop after a daemon restart failed: {}",
                        error_chain(&e)
                    )),
                )
            }
        };
        ctx.store
            .update_box_state(&record.id, record.generation, to, reason.as_deref())?;
        tracing::info!(box_id = %record.id, name = %record.name, was = %record.state, now = %to, "reconcile: box reset");
    }
    let known: HashSet<_> = records.iter().map(|r| &r.id).collect();
    match ctx.runtime.list().await {
        Ok(held) => {
            for id in held.iter().filter(|id| !known.contains(id)) {
                match ctx.runtime.remove(id).await {
                    Ok(()) => {
                        tracing::info!(box_id = %id, "reconcile: removed a box the store does not know")
                    }
                    Err(e) => {
                        tracing::error!(box_id = %id, error = %error_chain(&e), "reconcile: cannot remove an unknown box")
                    }
                }
            }
        }
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "reconcile: cannot list the runtime's boxes")
        }
    }
    Ok(())
}

/// At shutdown: stop every box that may run. Errors are logged; every box gets its try.
pub async fn stop_all(ctx: &Ctx) {
    let records = match ctx.store.list_all_boxes() {
        Ok(records) => records,
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "shutdown: cannot list boxes");
            return;
        }
    };
    for record in records.iter().filter(|r| r.state.may_have_processes()) {
        if let Err(e) = stop_box(ctx, &record.id).await {
            tracing::error!(box_id = %record.id, error = %error_chain(&e), "shutdown: cannot stop box");
        }
    }
}
