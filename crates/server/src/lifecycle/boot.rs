//! A new boot of a `stopped`, `failed` or `snapshotted` box, inside a wake's
//! [`Transition`]: the box goes `starting` (its tenant's `max_running` checked), its
//! [`BootPlan`] is made, its rootfs and egress prepared, and the runtime restores it from
//! its snapshot or cold-starts it. Each step that fails leaves the box `failed` with that
//! step's record; a boot that succeeds is recorded as a `boot` event with its phases.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use berth_runtime::{error_chain, BootToken, Booted, BoxSpec, GuestClient, Runtime, RuntimeError};
use berth_store::{BootPhase, BoxState, LastBoot, PhaseSource};

use crate::ctx::STOP_GRACE;
use crate::error::{OpError, TemplateProblem};
use crate::lifecycle::boot_plan::{BootPlan, PlanError, Prepared};
use crate::lifecycle::rootfs::rootfs_for;
use crate::lifecycle::transition::{Step, Transition};
use crate::ops::box_disk;

/// Boots the box held by `t` on `runtime`; returns the new boot's client.
pub(super) async fn boot(
    t: &mut Transition<'_>,
    runtime: &Arc<dyn Runtime>,
) -> Result<GuestClient, OpError> {
    let ctx = t.ctx();
    let mut clock = Clock::start();
    // Limits changed while the box ran apply now (`box_update.rs`).
    if t.record().pending_limits.is_some() {
        ctx.store.apply_pending_limits(t.id())?;
        t.reload()?;
    }
    let mut random = [0u8; 32];
    getrandom::fill(&mut random).map_err(OpError::Random)?;
    // The snapshot's boot token opens the channel that hands the new one over; read before
    // `starting`, which clears it from the row.
    let snapshot_token = match t.record().state {
        BoxState::Snapshotted => ctx
            .store
            .boot_token(t.id())?
            .and_then(|t| BootToken::from_hex(&t)),
        _ => None,
    };
    // Every wake that cold-starts (start, exec, files, a message) comes here: the tenant's
    // `max_running` is checked in the same transaction as the change to `starting`.
    t.begin_start()?;
    let record = t.record().clone();
    // The template as it is now, by the box's stored name: a reload applies at the next
    // start. A missing or unusable one fails the start, with the reason recorded.
    let planned = BootPlan::new(
        &record,
        ctx.templates.get(&record.template),
        runtime.name(),
        ctx.box_egress(&record),
        snapshot_token,
    );
    let plan = match planned {
        Ok(plan) => plan,
        Err(e) => {
            let error = match e {
                PlanError::Template { template, problem } => OpError::StartTemplate {
                    name: record.name.clone(),
                    template,
                    problem,
                },
                PlanError::NoIdRange { slot } => OpError::NoIdRange {
                    id: record.id.clone(),
                    slot,
                },
            };
            t.failed(Step::Plan, &error, Some(BoxState::Failed));
            return Err(error);
        }
    };
    clock.lap("plan");
    // A box moved here from another node brings its volume from its durable copy.
    if let Err(error) = super::restore_copy::restore_if_moved(t).await {
        t.failed(Step::Volume, &error, Some(BoxState::Failed));
        return Err(error);
    }
    let r = &plan.rootfs;
    let rootfs = match rootfs_for(
        &ctx.data_dir,
        &r.template,
        &r.base,
        r.layer_targets.clone(),
        &r.runtime,
    )
    .await
    {
        Ok(rootfs) => rootfs,
        Err(e) => {
            let error = OpError::StartTemplate {
                name: record.name.clone(),
                template: record.template.clone(),
                problem: TemplateProblem::Rootfs(Box::new(e)),
            };
            t.failed(Step::Rootfs, &error, Some(BoxState::Failed));
            return Err(error);
        }
    };
    clock.lap("rootfs");
    // A restore keeps the snapshotted boot's CA and placeholders (the box trusts and holds
    // them) under the box's policy now; a cold start gets fresh ones. The secrets are read
    // as they are now either way.
    let secrets = || ctx.tenant_secrets(&record.tenant_id);
    let restoring = match &plan.restore_from {
        None => None,
        Some(old) => match ctx
            .egress
            .restore_under(&record.id, &plan.egress, secrets())
        {
            Ok(Some(egress)) => Some((old.clone(), egress)),
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
    let (restore_from, egress) = match restoring {
        Some((old, egress)) => (Some(old), egress),
        None => match ctx.egress.prepare(&record.id, &plan.egress, secrets()) {
            Ok(egress) => (None, egress),
            Err(source) => {
                let error = OpError::StartEgress {
                    name: record.name.clone(),
                    source: Box::new(source),
                };
                t.failed(Step::Egress, &error, Some(BoxState::Failed));
                return Err(error);
            }
        },
    };
    let spec = plan.spec(
        &record,
        Prepared {
            rootfs,
            egress_setup: egress.setup.clone(),
            egress_env: egress.env.clone(),
            boot_token: BootToken::from_random(random),
            disk_mib: box_disk::volume_mib_for_start(ctx, &record, plan.wanted_disk_mib),
        },
    );
    clock.lap("egress");
    // A cold start deletes whatever snapshot is left (`Runtime::start`).
    let call = async {
        match &restore_from {
            Some(old) => restore_or_start(runtime, &spec, old).await,
            None => runtime.start(&spec).await.map(|booted| (booted, false)),
        }
    };
    let (booted, restored) = match t
        .run(Step::RuntimeStart, Some(BoxState::Failed), call)
        .await
    {
        Ok(started) => started,
        Err(source) => {
            ctx.egress.end(&record.id);
            return Err(OpError::StartFailed {
                name: record.name,
                source: Box::new(source),
            });
        }
    };
    clock.lap("runtime_start");
    let Booted {
        client,
        egress: listener,
        phases,
    } = booted;
    if let Err(e) = t.write(BoxState::Running, None) {
        // Keep the store truthful: a box we cannot record as running must not run.
        if let Err(stop) = runtime.stop(&record.id, STOP_GRACE).await {
            tracing::error!(box_id = %record.id, error = %error_chain(&stop), "cannot stop an unrecorded box");
        }
        return Err(e);
    }
    t.live.egress = Some(ctx.egress.serve(&egress, listener));
    t.live.client = Some(client.clone());
    t.live.boot += 1;
    // The idle clock starts at the wake.
    ctx.activity.touch(&record.id);
    // Messages go only to a harness this boot runs; events come from every box.
    let harness = spec.harness.is_some();
    super::boot_tasks::start(ctx, &record.id, &mut t.live, runtime.clone(), harness);
    clock.lap("first_ready");
    let boot = clock.finish(restored, phases.0.into_iter().map(|p| (p.name, p.micros)));
    tracing::info!(box_id = %record.id, name = %record.name, restored, elapsed_ms = boot.total_micros / 1000, "box started");
    // The boot token is kept so a restarted daemon can reattach (ops/reconcile.rs).
    if let Err(e) = ctx
        .store
        .record_boot(&record.id, spec.boot_token.as_str(), &boot)
    {
        tracing::error!(box_id = %record.id, error = %error_chain(&e), "cannot store the boot token and the boot's phases");
    }
    Ok(client)
}

/// Restores the box from its snapshot; if that fails, the box cold-starts (which drops
/// the snapshot: its disk is all it keeps then, as after a stop). `true`: restored.
async fn restore_or_start(
    runtime: &Arc<dyn Runtime>,
    spec: &BoxSpec,
    old: &BootToken,
) -> Result<(Booted, bool), RuntimeError> {
    match runtime.restore(spec, old).await {
        Ok(booted) => return Ok((booted, true)),
        Err(e) => {
            tracing::warn!(box_id = %spec.id, error = %error_chain(&e), "cannot restore the box from its snapshot; it starts cold");
        }
    }
    runtime.start(spec).await.map(|booted| (booted, false))
}

/// The daemon's timing of one boot, step by step.
struct Clock {
    began: Instant,
    /// The same moment on the wall clock (the desktop's `ready_after_ms` counts from it).
    began_at: SystemTime,
    last: Instant,
    phases: Vec<BootPhase>,
}

impl Clock {
    fn start() -> Clock {
        let now = Instant::now();
        Clock {
            began: now,
            began_at: SystemTime::now(),
            last: now,
            phases: Vec::new(),
        }
    }

    /// Step `name` ended now.
    fn lap(&mut self, name: &str) {
        let now = Instant::now();
        self.phases.push(BootPhase {
            name: name.to_owned(),
            micros: micros(now - self.last),
            source: PhaseSource::Daemon,
        });
        self.last = now;
    }

    /// The boot's record: the daemon's steps, then the runtime's own (inside
    /// `runtime_start`).
    fn finish(self, restored: bool, runtime: impl Iterator<Item = (String, u64)>) -> LastBoot {
        let mut phases = self.phases;
        phases.extend(runtime.map(|(name, micros)| BootPhase {
            name,
            micros,
            source: PhaseSource::Runtime,
        }));
        let began_at_ms = self
            .began_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .and_then(|d| u64::try_from(d.as_millis()).ok());
        LastBoot {
            began_at_ms,
            total_micros: micros(self.began.elapsed()),
            restored,
            phases,
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
