//! Moving a stopped box to another runtime (`POST /v1/boxes/{ref}/start` with
//! `{"runtime": …}`). Its volume goes with it: every runtime boots the same ext4 image
//! (`<data>/boxes/<id>/volume.ext4`). The box's template base must run on the new runtime,
//! and the old runtime must still be there to stop whatever it may hold of the box first:
//! two runtimes on one volume image would corrupt it.

use berth_protocol::BoxId;
use berth_store::{BoxRecord, BoxState};

use crate::ctx::{Ctx, STOP_GRACE};
use crate::error::OpError;
use crate::lifecycle::detached::detached;
use crate::ops::box_create::check_base;
use crate::ops::box_find::reload;
use berth_runtime::error_chain;

/// Moves the box to `runtime` (a no-op when it is there already); the box must be stopped
/// or failed.
pub async fn move_box(ctx: &Ctx, id: &BoxId, runtime: &str) -> Result<BoxRecord, OpError> {
    let (ctx, task_id, runtime) = (ctx.clone(), id.clone(), runtime.to_owned());
    detached(
        id,
        async move { move_locked(&ctx, &task_id, &runtime).await },
    )
    .await
}

async fn move_locked(ctx: &Ctx, id: &BoxId, runtime: &str) -> Result<BoxRecord, OpError> {
    let slot = ctx.boxes.slot(id);
    let _live = slot.lifecycle.lock().await;
    let record = reload(ctx, id)?;
    if record.runtime == runtime {
        return Ok(record);
    }
    ctx.runtimes.get(runtime).map_err(OpError::InvalidRuntime)?;
    let registry = ctx.templates.current();
    let template = registry
        .get(&record.template)
        .ok_or_else(|| OpError::UnknownTemplate {
            template: record.template.clone(),
            available: registry.list().iter().map(|t| t.name.clone()).collect(),
        })?;
    check_base(&record.template, &template.base, runtime)?;
    if !matches!(record.state, BoxState::Stopped | BoxState::Failed) {
        // The store refuses too; this says it before the old runtime is touched.
        return Err(berth_store::StoreError::NotStopped {
            id: id.clone(),
            state: record.state,
        }
        .into());
    }
    let legacy = berth_runtime::sandbox::Layout::new(&ctx.data_dir)
        .box_paths(id)
        .legacy_volume_dir();
    if legacy.is_dir() && !berth_runtime::volume_image(&ctx.data_dir, id).exists() {
        return Err(OpError::VolumeNotMigrated {
            name: record.name.clone(),
        });
    }
    let old = ctx
        .runtimes
        .get(&record.runtime)
        .map_err(|e| OpError::MoveFromUnavailable {
            name: record.name.clone(),
            from: record.runtime.clone(),
            reason: error_chain(&e),
        })?;
    // A failed box may have left processes or mounts behind on its old runtime.
    old.stop(id, STOP_GRACE)
        .await
        .map_err(|source| OpError::Runtime {
            action: "stop (before moving it)",
            id: id.clone(),
            source: Box::new(source),
        })?;
    ctx.store.set_box_runtime(id, record.generation, runtime)?;
    tracing::info!(box_id = %id, name = %record.name, from = %record.runtime, to = %runtime, "box moved to another runtime");
    reload(ctx, id)
}
