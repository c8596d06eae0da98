//! Bringing the runtime in line with the store at daemon start, and stopping every box at
//! daemon shutdown. A box recorded `running` whose stored boot token still reaches its
//! agent is reattached (client and pumps restored); every other box that may have
//! processes is stopped and wakes cold on its next call, with the same disk (a paused box
//! is resumed and reattached first; a snapshotted one has no processes and keeps its
//! snapshot). Boxes with
//! queued messages are woken, so no accepted message waits for a later call.

use std::collections::HashSet;
use std::time::Duration;

use std::sync::Arc;

use berth_protocol::BoxId;
use berth_runtime::{BootToken, IdMap, Runtime};
use berth_store::{BoxRecord, BoxState};

use crate::ctx::{Ctx, STOP_GRACE};
use crate::error::OpError;
use crate::lifecycle::transition::{Kind, Step, Transition};
use berth_runtime::error_chain;

/// How long a reattach waits for the agent's `info`.
const REATTACH_TIMEOUT: Duration = Duration::from_secs(2);

/// At start: reattach running boxes that still answer, stop every other box the store
/// thinks may run and mark it `stopped` (or `failed` if the runtime cannot stop it),
/// remove what the runtime holds for boxes with no row, and wake boxes with queued
/// messages.
pub async fn reconcile(ctx: &Ctx) -> Result<(), OpError> {
    // Stored events wake live readers (SSE) from now on.
    ctx.store.add_event_listener(ctx.boxes.clone());
    reconcile_boxes(ctx).await
}

/// [`reconcile`]'s work on the boxes: at start, and on a node that renews its lease again
/// after it fenced itself.
pub async fn reconcile_boxes(ctx: &Ctx) -> Result<(), OpError> {
    let records = ctx.store.list_boxes_on_node(ctx.role.node_scope())?;
    for record in &records {
        let mut t = Transition::begin(ctx, &record.id, Kind::Reconcile).await?;
        // A box whose runtime this daemon lacks is never moved to another: it is `failed`
        // with the reason (unless already `stopped`: nothing of it runs, and its next start
        // fails with the same reason).
        let runtime = match t.runtime() {
            Ok(runtime) => runtime,
            Err(e) => {
                if !matches!(t.record().state, BoxState::Stopped | BoxState::Failed) {
                    t.failed(Step::Runtime, &e, Some(BoxState::Failed));
                }
                continue;
            }
        };
        if !t.record().state.may_have_processes() {
            continue;
        }
        // A daemon that died while it copied the box's volume left it frozen: its writers
        // would wait for good.
        if let Err(e) = runtime.thaw_volume(&record.id).await {
            tracing::warn!(box_id = %record.id, error = %berth_runtime::error_chain(&e), "reconcile: cannot thaw the box's volume");
        }
        // A paused box is thawed to be reached; the reclaimer pauses it again when idle.
        if t.record().state == BoxState::Paused {
            thaw(&mut t, &runtime).await?;
        }
        if t.record().state == BoxState::Running && reattach(&mut t, &runtime).await? {
            continue;
        }
        let (id, was) = (record.id.clone(), t.record().state);
        ctx.egress.end(&id);
        let stopped = t
            .run(
                Step::RuntimeStop,
                Some(BoxState::Failed),
                runtime.stop(&id, STOP_GRACE),
            )
            .await;
        if stopped.is_ok() {
            t.write(BoxState::Stopped, None)?;
        }
        tracing::info!(box_id = %id, name = %record.name, was = %was, now = %t.record().state, "reconcile: box reset");
    }
    let known: HashSet<_> = records.iter().map(|r| &r.id).collect();
    for runtime in ctx.runtimes.ready() {
        remove_unknown(runtime.as_ref(), &known).await;
    }
    if ctx.role.node().is_some() {
        drop_moved(ctx, &known).await;
    }
    for id in ctx
        .store
        .boxes_with_queued_messages(ctx.role.node_scope())?
    {
        tracing::info!(box_id = %id, "reconcile: waking a box with queued messages");
        ctx.lifecycle().wake_for_messages(&id);
    }
    Ok(())
}

/// On a node: removes the box directories (volume images, snapshots) of boxes that are no
/// longer this node's: moved off it while it was cut off (`cluster::failover`), or deleted
/// meanwhile. What it held of them is stale: the box lives on elsewhere, from its copy.
async fn drop_moved(ctx: &Ctx, known: &HashSet<&BoxId>) {
    let Ok(dir) = std::fs::read_dir(ctx.data_dir.join(crate::ctx::BOXES_DIR)) else {
        return;
    };
    let Some(any_runtime) = ctx.runtimes.ready().into_iter().next() else {
        return;
    };
    for entry in dir.flatten() {
        let Ok(id) = entry.file_name().to_string_lossy().parse::<BoxId>() else {
            continue;
        };
        if known.contains(&id) {
            continue;
        }
        let runtime = match ctx.store.get_box(&id) {
            Ok(Some(record)) => ctx
                .runtime_of(&record)
                .unwrap_or_else(|_| any_runtime.clone()),
            Ok(None) => any_runtime.clone(),
            Err(e) => {
                tracing::warn!(box_id = %id, error = %error_chain(&e), "reconcile: cannot read the box's row; its files stay");
                continue;
            }
        };
        match runtime.remove(&id).await {
            Ok(()) => {
                tracing::info!(box_id = %id, "reconcile: dropped the stale files of a box that lives on another node now")
            }
            Err(e) => {
                tracing::warn!(box_id = %id, error = %error_chain(&e), "reconcile: cannot drop the stale files of a moved box")
            }
        }
    }
}

/// Removes what `runtime` holds for boxes the store does not know.
async fn remove_unknown(runtime: &dyn Runtime, known: &HashSet<&BoxId>) {
    match runtime.list().await {
        Ok(held) => {
            for id in held.iter().filter(|id| !known.contains(id)) {
                match runtime.remove(id).await {
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
            tracing::error!(runtime = runtime.name(), error = %error_chain(&e), "reconcile: cannot list the runtime's boxes")
        }
    }
}

/// A box the old daemon left paused, resumed and recorded `running` (left paused if the
/// runtime cannot resume it: it is stopped then, like any box that cannot be reached).
async fn thaw(t: &mut Transition<'_>, runtime: &Arc<dyn Runtime>) -> Result<(), OpError> {
    if let Err(e) = runtime.resume(t.id()).await {
        tracing::info!(box_id = %t.id(), error = %error_chain(&e), "reconcile: cannot resume the paused box; stopping it");
        return Ok(());
    }
    t.write(BoxState::Running, None)
}

/// Reaches the box's agent with its stored boot token; on an answer, restores the
/// client and the pumps. `false`: the box must be stopped.
async fn reattach(t: &mut Transition<'_>, runtime: &Arc<dyn Runtime>) -> Result<bool, OpError> {
    let ctx = t.ctx();
    let record = t.record().clone();
    let Some(token) = ctx
        .store
        .boot_token(&record.id)?
        .and_then(|t| BootToken::from_hex(&t))
    else {
        return Ok(false);
    };
    let client = runtime.channel(&record.id, &token);
    match tokio::time::timeout(REATTACH_TIMEOUT, client.info()).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::info!(box_id = %record.id, error = %error_chain(&e), "reconcile: the box does not answer; stopping it");
            return Ok(false);
        }
        Err(_) => {
            tracing::info!(box_id = %record.id, "reconcile: the box does not answer in time; stopping it");
            return Ok(false);
        }
    }
    // The old daemon's gateway died with it: the same boot's policy, CA and placeholders
    // (the box trusts and holds them) on a fresh listener.
    let restored = ctx
        .egress
        .restore(&record.id, ctx.tenant_secrets(&record.tenant_id));
    let boot_egress = match restored {
        Ok(Some(boot)) => boot,
        Ok(None) => {
            tracing::info!(box_id = %record.id, "reconcile: no egress state saved for the box; stopping it");
            return Ok(false);
        }
        Err(e) => {
            tracing::warn!(box_id = %record.id, error = %error_chain(&e), "reconcile: cannot restore the box's egress; stopping it");
            return Ok(false);
        }
    };
    let listener = match runtime.rebind_egress(&record.id, id_map(&record)?).await {
        Ok(listener) => listener,
        Err(e) => {
            tracing::warn!(box_id = %record.id, error = %error_chain(&e), "reconcile: cannot bind the box's egress channel; stopping it");
            return Ok(false);
        }
    };
    t.live.egress = Some(ctx.egress.serve(&boot_egress, listener));
    t.live.client = Some(client.clone());
    t.live.boot += 1;
    let harness = ctx.box_has_harness(&record);
    crate::lifecycle::boot_tasks::start(ctx, &record.id, &mut t.live, runtime.clone(), harness);
    tracing::info!(box_id = %record.id, name = %record.name, "reconcile: reattached a running box");
    Ok(true)
}

fn id_map(record: &BoxRecord) -> Result<IdMap, OpError> {
    IdMap::for_slot(record.id_slot).ok_or_else(|| OpError::NoIdRange {
        id: record.id.clone(),
        slot: record.id_slot,
    })
}

/// At shutdown: end open event streams and stop every box that may run. Errors are
/// logged; every box gets its try.
pub async fn stop_all(ctx: &Ctx) {
    ctx.boxes.close_streams();
    let records = match ctx.store.list_boxes_on_node(ctx.role.node_scope()) {
        Ok(records) => records,
        Err(e) => {
            tracing::error!(error = %error_chain(&e), "shutdown: cannot list boxes");
            return;
        }
    };
    for record in records.iter().filter(|r| r.state.may_have_processes()) {
        if let Err(e) = ctx.lifecycle().stop(&record.id).await {
            tracing::error!(box_id = %record.id, error = %error_chain(&e), "shutdown: cannot stop box");
        }
    }
}
