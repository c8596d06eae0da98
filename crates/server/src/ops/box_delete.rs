//! `DELETE /v1/boxes/{ref}`: stop the box and delete everything of it, the volume
//! included.

use berth_protocol::BoxId;
use berth_store::BoxState;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::lifecycle::transition::{Kind, Transition};

pub async fn delete_box(ctx: &Ctx, id: &BoxId) -> Result<(), OpError> {
    if ctx.role.api().is_some() {
        return crate::cluster::remote::run(ctx, id, crate::cluster::op_kind::DELETE)
            .await
            .map(drop)
            .or_else(|e| match e {
                // Deleted: its row is gone, and so is the op with it.
                OpError::BoxNotFound { .. } => Ok(()),
                e => Err(e),
            });
    }
    let (ctx, task_id) = (ctx.clone(), id.clone());
    detached(id, async move { delete_locked(&ctx, &task_id).await }).await
}

async fn delete_locked(ctx: &Ctx, id: &BoxId) -> Result<(), OpError> {
    let mut t = Transition::begin(ctx, id, Kind::Delete).await?;
    t.live.end_boot();
    ctx.egress.remove(id);
    t.runtime()?
        .remove(id)
        .await
        .map_err(|source| OpError::Runtime {
            action: "remove",
            id: id.clone(),
            source: Box::new(source),
        })?;
    t.write(BoxState::Deleted, None)?;
    let name = t.record().name.clone();
    drop(t);
    ctx.boxes.forget(id);
    ctx.activity.forget(id);
    if let Some(durable) = &ctx.durable {
        durable.forget(id);
    }
    ctx.memory.forget_box(id).await;
    tracing::info!(box_id = %id, %name, "box deleted");
    Ok(())
}
