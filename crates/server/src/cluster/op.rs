//! The ops a node does for the API tier, and how it does each: through the same
//! [`crate::lifecycle::Lifecycle`] a single host uses, so a box's states and their rules
//! are written once.

use berth_store::{BoxState, Op};

use crate::cluster::op_kind::{
    CREATE, DELETE, PAUSE, RESTORE, RESUME, SNAPSHOT, START, STOP, WAKE,
};

use crate::ctx::Ctx;
use crate::error::OpError;

/// Does `op` on this node.
pub async fn execute(ctx: &Ctx, op: &Op) -> Result<(), OpError> {
    let id = &op.box_id;
    let lifecycle = ctx.lifecycle();
    match op.kind.as_str() {
        CREATE => {
            let record = crate::ops::box_find::reload(ctx, id)?;
            // What the API replica could not check: this node's runtimes and templates.
            ctx.runtime_of(&record)?;
            if ctx.templates.get(&record.template).is_none() {
                return Err(OpError::UnknownTemplate {
                    template: record.template,
                    available: ctx
                        .templates
                        .current()
                        .list()
                        .iter()
                        .map(|t| t.name.clone())
                        .collect(),
                });
            }
        }
        START => drop(lifecycle.start(id).await?),
        STOP => drop(lifecycle.stop(id).await?),
        PAUSE => drop(lifecycle.pause(id).await?),
        RESUME => drop(lifecycle.resume(id).await?),
        SNAPSHOT => drop(lifecycle.snapshot(id).await?),
        RESTORE => drop(lifecycle.restore_from_copy(id, None).await?),
        DELETE => crate::ops::box_delete::delete_box(ctx, id).await?,
        WAKE => lifecycle.wake_for_messages(id),
        other => {
            return Err(OpError::OnNode {
                status: 400,
                code: berth_protocol::ErrorCode::InvalidRequest,
                message: format!("this node does not know the op {other:?}; upgrade it"),
            })
        }
    }
    Ok(())
}

/// After an op, a box left asleep with messages queued is woken: a wake the API could not
/// queue while this op was open is not lost.
pub fn wake_if_messages_wait(ctx: &Ctx, op: &Op) {
    if op.kind == DELETE || op.kind == WAKE {
        return;
    }
    let asleep = ctx
        .store
        .get_box(&op.box_id)
        .ok()
        .flatten()
        .is_some_and(|r| r.state != BoxState::Running && r.state != BoxState::Deleted);
    let waiting = ctx.store.count_undelivered(&op.box_id).is_ok_and(|n| n > 0);
    if asleep && waiting {
        ctx.lifecycle().wake_for_messages(&op.box_id);
    }
}
