//! Waking a box by its cheapest rung: `POST /v1/boxes/{ref}/start|resume`, and every call
//! that needs the box (exec, files, a message). A paused box is thawed, a snapshotted one
//! restored (a cold boot if the restore fails), a stopped or failed one cold-started. Under
//! the box's lifecycle lock, so concurrent wakes wake it once.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use berth_protocol::BoxId;
use berth_runtime::{
    BootToken, Booted, BoxSpec, GuestClient, GuestError, IdMap, Limits, Runtime, RuntimeStatus,
};
use berth_store::{BoxRecord, BoxState};

use crate::boxes::Live;
use crate::ctx::{Ctx, STOP_GRACE};
use crate::error::{OpError, TemplateProblem};
use crate::lifecycle::detached::detached;
use crate::lifecycle::rootfs::rootfs_for;
use crate::ops::box_disk;
use crate::ops::box_find::reload;
use crate::templates::Template;
use berth_runtime::error_chain;

/// Who wants the box awake: whether a box asleep with `auto_resume` off wakes for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Waker {
    /// `start` or `resume`: always.
    Caller,
    /// A call that needs the box (exec, files, a message): per the box's `auto_resume`.
    Call,
}

/// Wakes the box if needed; returns its current row (`running`).
pub(super) async fn start_box(ctx: &Ctx, id: &BoxId, waker: Waker) -> Result<BoxRecord, OpError> {
    ensure_running(ctx, id, waker).await?;
    reload(ctx, id)
}

/// Runs `call` against the box's agent, waking the box first. When the agent cannot be
/// reached and the runtime says the box is no longer running (its processes died), the
/// box is recorded as stopped, woken again, and the call made once more: a refused
/// connection means the call never reached the box, so it is safe to repeat.
pub(super) async fn with_guest<T, F, Fut>(ctx: &Ctx, id: &BoxId, call: F) -> Result<T, OpError>
where
    F: Fn(GuestClient) -> Fut,
    Fut: Future<Output = Result<T, GuestError>>,
{
    let (client, boot) = ensure_running(ctx, id, Waker::Call).await?;
    match call(client).await {
        Err(GuestError::Connect { .. }) if forget_if_dead(ctx, id, boot).await? => {
            let (client, _) = ensure_running(ctx, id, Waker::Call).await?;
            Ok(call(client).await?)
        }
        other => Ok(other?),
    }
}

/// The guest client of the running box and its boot number, waking it by its cheapest
/// rung.
pub(super) async fn ensure_running(
    ctx: &Ctx,
    id: &BoxId,
    waker: Waker,
) -> Result<(GuestClient, u64), OpError> {
    let (ctx, task_id) = (ctx.clone(), id.clone());
    detached(id, async move { wake_locked(&ctx, &task_id, waker).await }).await
}

/// Wakes the box for its queued messages without making the caller wait, and tells a
/// running delivery pump to look at the queue.
pub(super) fn wake_for_messages(ctx: &Ctx, id: &BoxId, waker: Waker) {
    ctx.boxes.slot(id).delivery.notify_one();
    // One wake per post: they queue on the box's lifecycle lock, and each after the first
    // finds the box running (a wake racing a stop still leaves the box running after).
    let (ctx, id) = (ctx.clone(), id.clone());
    tokio::spawn(async move {
        match ensure_running(&ctx, &id, waker).await {
            Ok(_) => {}
            Err(OpError::Asleep { .. }) => {
                tracing::debug!(box_id = %id, "the box sleeps with auto_resume off: its messages wait for a resume");
            }
            Err(e) => {
                tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot wake the box for its messages");
            }
        }
    });
}

/// After boot `boot` of the box could not be reached: `true` when that boot is over (the
/// runtime no longer runs it, or another boot replaced it), so a new wake makes sense.
pub(super) async fn forget_if_dead(ctx: &Ctx, id: &BoxId, boot: u64) -> Result<bool, OpError> {
    let (ctx, id) = (ctx.clone(), id.clone());
    detached(&id.clone(), async move {
        let slot = ctx.boxes.slot(&id);
        let mut live = slot.lifecycle.lock().await;
        if live.boot != boot || live.client.is_none() {
            return Ok(true);
        }
        let record = reload(&ctx, &id)?;
        let runtime = ctx.runtime_of(&record)?;
        let status = runtime
            .status(&id)
            .await
            .map_err(|source| OpError::Runtime { action: "query", id: id.clone(), source: Box::new(source) })?;
        if status != RuntimeStatus::Stopped {
            return Ok(false);
        }
        tracing::warn!(box_id = %id, name = %record.name, "the box's processes exited; it will be started again");
        live.end_boot();
        runtime
            .stop(&id, STOP_GRACE)
            .await
            .map_err(|source| OpError::Runtime { action: "stop", id: id.clone(), source: Box::new(source) })?;
        if record.state.may_have_processes() {
            ctx.store.update_box_state(&id, record.generation, BoxState::Stopped, Some("its processes exited"))?;
        }
        Ok(true)
    })
    .await
}

async fn wake_locked(ctx: &Ctx, id: &BoxId, waker: Waker) -> Result<(GuestClient, u64), OpError> {
    let slot = ctx.boxes.slot(id);
    let mut live = slot.lifecycle.lock().await;
    let mut record = reload(ctx, id)?;
    let runtime = ctx.runtime_of(&record)?.clone();
    let asleep = matches!(record.state, BoxState::Paused | BoxState::Snapshotted);
    if asleep && !record.auto_resume && waker == Waker::Call {
        return Err(OpError::Asleep {
            name: record.name,
            state: record.state,
        });
    }
    match record.state {
        BoxState::Running => {
            if let Some(client) = &live.client {
                return Ok((client.clone(), live.boot));
            }
        }
        BoxState::Paused => {
            if let Some(client) = live.client.clone() {
                runtime
                    .resume(id)
                    .await
                    .map_err(|source| OpError::Runtime {
                        action: "resume",
                        id: id.clone(),
                        source: Box::new(source),
                    })?;
                ctx.store
                    .update_box_state(id, record.generation, BoxState::Running, None)?;
                // The idle clock starts again at the wake, as after a cold start.
                ctx.activity.touch(id);
                tracing::info!(box_id = %id, name = %record.name, "box resumed");
                return Ok((client, live.boot));
            }
        }
        BoxState::Snapshotted => {
            let client = boot(ctx, &runtime, &mut live, record).await?;
            return Ok((client, live.boot));
        }
        BoxState::Stopped
        | BoxState::Failed
        | BoxState::Starting
        | BoxState::Stopping
        | BoxState::Deleted => {}
    }
    if record.state.may_have_processes() {
        // The store says something runs, but this daemon holds no client for it (a start
        // cut short): stop whatever is left, then cold start with a fresh token.
        live.end_boot();
        runtime
            .stop(id, STOP_GRACE)
            .await
            .map_err(|source| OpError::Runtime {
                action: "stop",
                id: id.clone(),
                source: Box::new(source),
            })?;
        ctx.store
            .update_box_state(id, record.generation, BoxState::Stopped, None)?;
        record = reload(ctx, id)?;
    }
    let client = boot(ctx, &runtime, &mut live, record).await?;
    Ok((client, live.boot))
}

/// A new boot of a `stopped`, `failed` or `snapshotted` box, with the lifecycle lock held:
/// a restore from the snapshot if there is one, else (or if the restore fails) a cold start.
async fn boot(
    ctx: &Ctx,
    runtime: &Arc<dyn Runtime>,
    live: &mut Live,
    record: BoxRecord,
) -> Result<GuestClient, OpError> {
    // Limits changed while the box ran apply now (`box_update.rs`).
    let record = match record.pending_limits {
        Some(_) => ctx.store.apply_pending_limits(&record.id)?,
        None => record,
    };
    // The template as it is now, by the box's stored name: a reload applies at the next
    // start. A missing or unusable one fails the start below, with the reason recorded.
    let template = ctx.templates.get(&record.template);
    let id_map = IdMap::for_slot(record.id_slot).ok_or_else(|| OpError::NoIdRange {
        id: record.id.clone(),
        slot: record.id_slot,
    })?;
    // A fresh token at every start: a client of an earlier boot can never reach this one.
    let mut random = [0u8; 32];
    getrandom::fill(&mut random).map_err(OpError::Random)?;
    // The snapshot's boot token opens the channel that hands the new one over; read before
    // `starting`, which clears it from the row.
    let snapshot_token = match record.state {
        BoxState::Snapshotted => ctx
            .store
            .boot_token(&record.id)?
            .and_then(|t| BootToken::from_hex(&t)),
        _ => None,
    };
    // Every wake that cold-starts (start, exec, files, a message) comes here: the tenant's
    // `max_running` is checked in the same transaction as the change to `starting`.
    let generation = ctx.store.begin_start(&record.id, record.generation)?;
    if let Err(problem) = usable(template.as_deref()) {
        return Err(fail_template(ctx, record, generation, problem));
    }
    let Some(template) = template else {
        return Err(fail_template(
            ctx,
            record,
            generation,
            TemplateProblem::Missing,
        ));
    };
    let rootfs = match rootfs_for(
        &ctx.data_dir,
        &template.name,
        &template.base,
        template.layers.iter().map(|l| l.target.clone()).collect(),
        runtime.name(),
    )
    .await
    {
        Ok(rootfs) => rootfs,
        Err(e) => {
            return Err(fail_template(
                ctx,
                record,
                generation,
                TemplateProblem::Rootfs(Box::new(e)),
            ))
        }
    };
    // A restore keeps the snapshotted boot's CA and placeholders (the box trusts and holds
    // them) under the box's policy now; a cold start gets fresh ones. The secrets are read
    // as they are now either way.
    let policy = ctx.box_egress(&record);
    let secrets = || ctx.tenant_secrets(&record.tenant_id);
    let restoring = match snapshot_token {
        None => None,
        Some(old) => match ctx.egress.restore_under(&record.id, &policy, secrets()) {
            Ok(Some(egress)) => Some((old, egress)),
            Ok(None) => {
                tracing::info!(box_id = %record.id, "the snapshot's egress does not fit the box's policy now (a new credential rule); it starts cold");
                None
            }
            Err(e) => {
                tracing::warn!(box_id = %record.id, error = %error_chain(&e), "cannot restore the snapshot's egress; the box starts cold");
                None
            }
        },
    };
    let (snapshot_token, egress) = match restoring {
        Some((old, egress)) => (Some(old), egress),
        None => match ctx.egress.prepare(&record.id, &policy, secrets()) {
            Ok(egress) => (None, egress),
            Err(source) => {
                let error = OpError::StartEgress {
                    name: record.name.clone(),
                    source: Box::new(source),
                };
                record_failed(ctx, &record, generation, &error_chain(&error));
                return Err(error);
            }
        },
    };
    let spec = BoxSpec {
        id: record.id.clone(),
        hostname: record.name.clone(),
        rootfs,
        limits: Limits {
            memory_mib: record.memory_mib,
            pids: record.pids,
            cpus: record.cpus,
        },
        boot_token: BootToken::from_random(random),
        id_map,
        layers: template.layers.clone(),
        harness: crate::box_env::harness_with(template.harness.clone(), &record.env),
        egress: egress.setup.clone(),
        env: egress.env.clone(),
        disk_mib: box_disk::volume_mib_for_start(ctx, &record, template.disk_mib),
    };
    let began = Instant::now();
    // A cold start deletes whatever snapshot is left (`Runtime::start`).
    let started = match snapshot_token {
        Some(old) => restore_or_start(runtime, &spec, &old).await,
        None => runtime.start(&spec).await,
    };
    match started {
        Ok(Booted {
            client,
            egress: listener,
            ..
        }) => {
            if let Err(e) =
                ctx.store
                    .update_box_state(&record.id, generation, BoxState::Running, None)
            {
                // Keep the store truthful: a box we cannot record as running must not run.
                if let Err(stop) = runtime.stop(&record.id, STOP_GRACE).await {
                    tracing::error!(box_id = %record.id, error = %error_chain(&stop), "cannot stop an unrecorded box");
                }
                return Err(e.into());
            }
            tracing::info!(box_id = %record.id, name = %record.name, elapsed_ms = began.elapsed().as_millis() as u64, "box started");
            live.egress = Some(ctx.egress.serve(&egress, listener));
            live.client = Some(client.clone());
            live.boot += 1;
            // The idle clock starts at the wake.
            ctx.activity.touch(&record.id);
            // Kept so a restarted daemon can reattach (ops/reconcile.rs).
            if let Err(e) = ctx
                .store
                .set_boot_token(&record.id, spec.boot_token.as_str())
            {
                tracing::error!(box_id = %record.id, error = %error_chain(&e), "cannot store the boot token");
            }
            // Messages go only to a harness this boot runs; events come from every box.
            let harness = spec.harness.is_some();
            super::boot_tasks::start(ctx, &record.id, live, runtime.clone(), harness);
            Ok(client)
        }
        Err(source) => {
            ctx.egress.end(&record.id);
            record_failed(ctx, &record, generation, &error_chain(&source));
            Err(OpError::StartFailed {
                name: record.name,
                source: Box::new(source),
            })
        }
    }
}

/// Restores the box from its snapshot; if that fails, the box cold-starts (which drops
/// the snapshot: its disk is all it keeps then, as after a stop).
async fn restore_or_start(
    runtime: &Arc<dyn Runtime>,
    spec: &BoxSpec,
    old: &BootToken,
) -> Result<Booted, berth_runtime::RuntimeError> {
    let began = Instant::now();
    match runtime.restore(spec, old).await {
        Ok(booted) => {
            tracing::info!(box_id = %spec.id, elapsed_ms = began.elapsed().as_millis() as u64, "box restored from its snapshot");
            return Ok(booted);
        }
        Err(e) => {
            tracing::warn!(box_id = %spec.id, error = %error_chain(&e), "cannot restore the box from its snapshot; it starts cold");
        }
    }
    runtime.start(spec).await
}

/// Whether boxes can start from `template` now.
fn usable(template: Option<&Template>) -> Result<(), TemplateProblem> {
    match template {
        None => Err(TemplateProblem::Missing),
        Some(Template {
            unavailable: Some(reason),
            ..
        }) => Err(TemplateProblem::Unavailable {
            reason: reason.clone(),
        }),
        Some(_) => Ok(()),
    }
}

/// Records a start that the box's template forbids as `failed` with the reason.
fn fail_template(
    ctx: &Ctx,
    record: BoxRecord,
    generation: u64,
    problem: TemplateProblem,
) -> OpError {
    let error = OpError::StartTemplate {
        name: record.name.clone(),
        template: record.template.clone(),
        problem,
    };
    record_failed(ctx, &record, generation, &error_chain(&error));
    error
}

fn record_failed(ctx: &Ctx, record: &BoxRecord, generation: u64, reason: &str) {
    if let Err(e) =
        ctx.store
            .update_box_state(&record.id, generation, BoxState::Failed, Some(reason))
    {
        tracing::error!(box_id = %record.id, error = %error_chain(&e), "cannot record a failed start");
    }
}

/// In a task of its own (the pumps call it; stopping the boot aborts them): if boot `boot`
/// is over, record it and wake the box again so its queue drains.
pub(super) fn wake_if_dead(ctx: &Ctx, id: &BoxId, boot: u64) {
    let (ctx, id) = (ctx.clone(), id.clone());
    tokio::spawn(async move {
        match forget_if_dead(&ctx, &id, boot).await {
            Ok(true) => {
                if let Err(e) = ensure_running(&ctx, &id, Waker::Call).await {
                    tracing::error!(box_id = %id, error = %error_chain(&e), "cannot wake the box again");
                }
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(box_id = %id, error = %error_chain(&e), "cannot check whether the box is still running")
            }
        }
    });
}
