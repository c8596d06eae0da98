//! `DELETE /v1/boxes/{ref}`: stop the box and delete everything of it, the volume
//! included.

use berth_protocol::BoxId;
use berth_store::BoxState;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::ops::box_find::reload;

pub async fn delete_box(ctx: &Ctx, id: &BoxId) -> Result<(), OpError> {
    let (ctx, task_id) = (ctx.clone(), id.clone());
    detached(id, async move { delete_locked(&ctx, &task_id).await }).await
}

async fn delete_locked(ctx: &Ctx, id: &BoxId) -> Result<(), OpError> {
    let slot = ctx.boxes.slot(id);
    let mut live = slot.lifecycle.lock().await;
    let record = reload(ctx, id)?;
    live.end_boot();
    ctx.egress.remove(id);
    ctx.runtime_of(&record)?
        .remove(id)
        .await
        .map_err(|source| OpError::Runtime {
            action: "remove",
            id: id.clone(),
            source: Box::new(source),
        })?;
    ctx.store
        .update_box_state(id, record.generation, BoxState::Deleted, None)?;
    drop(live);
    ctx.boxes.forget(id);
    ctx.activity.forget(id);
    tracing::info!(box_id = %id, name = %record.name, "box deleted");
    Ok(())
}
