//! One path for every change of a box's lifecycle: a [`Transition`] holds the box's
//! lifecycle lock and its row as read under that lock, makes each state write with the
//! generation it last wrote or read (so a write never lands on a row that changed under
//! it), and turns each failed step into a record on the box: which transition, which step,
//! the cause, and what to do (`failure` in the box's API view). Wake, start, resume,
//! stop, pause, snapshot, reclaim, warm-pool claim, forget, fail and delete all go through
//! it; the state machine (`berth_store::check_transition`) stays the one authority on which
//! moves are legal. Each state written is counted and timed here for `/metrics`
//! (`crate::metrics::lifecycle`): from the lock taken, or from the previous write.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use berth_protocol::BoxId;
use berth_runtime::{error_chain, Runtime, RuntimeError};
use berth_store::{BoxRecord, BoxState, TransitionFailure};
use tokio::sync::OwnedMutexGuard;

use crate::boxes::Live;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_find::reload;

/// A runtime call of a transition that failed, as the caller hears it.
pub(crate) fn runtime_error(action: &'static str, id: &BoxId, source: RuntimeError) -> OpError {
    OpError::Runtime {
        action,
        id: id.clone(),
        source: Box::new(source),
    }
}

/// Which transition a [`Transition`] is, as its failure record names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A wake by a caller (`start`, `resume`, a scheduled wakeup) or by a call that needs
    /// the box.
    Start,
    Stop,
    Pause,
    Snapshot,
    /// The idle reclaimer taking the box down a rung.
    Reclaim,
    /// A warm pool box handed over to its new owner.
    Claim,
    /// A boot found dead after a call could not reach it.
    Forget,
    /// The harness gave up: the box is stopped and left failed.
    Fail,
    /// The boot ended on its own (the exit watch).
    Exit,
    /// The daemon's start bringing the runtime in line with the store.
    Reconcile,
    /// The box and its volume removed.
    Delete,
    /// A durable copy of a running box's volume.
    Copy,
    /// The box's volume restored from a durable copy.
    Restore,
    /// The box's volume staged for a backup (`crate::backup`).
    Backup,
    /// The box's memory read while it sleeps (nothing is written: held only so it stays
    /// asleep, or stays awake, for the read).
    Read,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Start => "start",
            Kind::Stop => "stop",
            Kind::Pause => "pause",
            Kind::Snapshot => "snapshot",
            Kind::Reclaim => "reclaim",
            Kind::Claim => "claim",
            Kind::Forget => "forget",
            Kind::Fail => "fail",
            Kind::Exit => "exit",
            Kind::Reconcile => "reconcile",
            Kind::Delete => "delete",
            Kind::Copy => "copy",
            Kind::Restore => "restore",
            Kind::Backup => "backup",
            Kind::Read => "read",
        }
    }
}

/// The step of a transition that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The box's template is gone or unusable, or the box has no uid range.
    Plan,
    /// The box's runtime is unavailable in this daemon.
    Runtime,
    Rootfs,
    /// The volume of a box moved from another node, restored from its durable copy.
    Volume,
    Egress,
    /// The runtime's start or restore.
    RuntimeStart,
    RuntimeStop,
    RuntimePause,
    RuntimeResume,
    RuntimeSnapshot,
    /// Handing a claimed warm-pool box its new token and egress channel.
    Handover,
    /// The box's harness kept exiting and gave up.
    Harness,
}

impl Step {
    fn as_str(self) -> &'static str {
        match self {
            Step::Plan => "plan",
            Step::Runtime => "runtime",
            Step::Rootfs => "rootfs",
            Step::Volume => "volume",
            Step::Egress => "egress",
            Step::RuntimeStart => "runtime_start",
            Step::RuntimeStop => "runtime_stop",
            Step::RuntimePause => "runtime_pause",
            Step::RuntimeResume => "runtime_resume",
            Step::RuntimeSnapshot => "runtime_snapshot",
            Step::Handover => "handover",
            Step::Harness => "harness",
        }
    }

    /// What the box's owner can do after this step failed.
    fn hint(self, name: &str) -> String {
        match self {
            Step::Plan => format!("restore or fix the box's template (berth template list), then start it again: POST /v1/boxes/{name}/start"),
            Step::Runtime => format!("bring the box's runtime back (GET /v1/runtimes says why it is unavailable), then start the box again: POST /v1/boxes/{name}/start"),
            Step::Rootfs => format!("the template's rootfs could not be made (berth image build, or fix its base), then start the box again: POST /v1/boxes/{name}/start"),
            Step::Volume => format!("the box's volume could not be restored from its durable copy (the daemon's log names the damage): restore another copy with berth box restore {name} --from-copy --generation N, then start it again: POST /v1/boxes/{name}/start"),
            Step::Egress => format!("set the secrets its credential rules name (berth secret set), then start the box again: POST /v1/boxes/{name}/start"),
            Step::RuntimeStart => format!("fix the cause (details in the daemon's log), then start the box again: POST /v1/boxes/{name}/start"),
            Step::RuntimeStop => format!("the box's processes may still run: stop it again (POST /v1/boxes/{name}/stop); the daemon's log has the details"),
            Step::RuntimePause | Step::RuntimeSnapshot => format!("the box was left as it was: retry, or stop it (POST /v1/boxes/{name}/stop)"),
            Step::RuntimeResume => format!("stop the box (POST /v1/boxes/{name}/stop), then start it: it boots cold with the same disk"),
            Step::Handover => format!("nothing to do: the box was stopped, and its next start boots it cold (POST /v1/boxes/{name}/start)"),
            Step::Harness => format!("the box's agent program kept exiting: its output is in the box's events (GET /v1/boxes/{name}/events); fix the template's harness, then start the box again: POST /v1/boxes/{name}/start"),
        }
    }
}

/// A transition under way: the box's lifecycle lock, held until it is dropped, and its row.
pub(crate) struct Transition<'c> {
    ctx: &'c Ctx,
    kind: Kind,
    /// The boot bookkeeping of the box (client, pumps, egress, exit watch).
    pub live: OwnedMutexGuard<Live>,
    record: BoxRecord,
    /// When the lock was taken, then when the state was last written: what the next
    /// write's time is counted from.
    since: Instant,
}

impl<'c> Transition<'c> {
    /// Takes the box's lifecycle lock (waiting for any transition under way) and reads its
    /// row afresh.
    pub async fn begin(ctx: &'c Ctx, id: &BoxId, kind: Kind) -> Result<Transition<'c>, OpError> {
        let live = ctx.boxes.slot(id).lifecycle.clone().lock_owned().await;
        let record = reload(ctx, id)?;
        Ok(Transition {
            ctx,
            kind,
            live,
            record,
            since: Instant::now(),
        })
    }

    /// The box's row as this transition last read or wrote it.
    pub fn record(&self) -> &BoxRecord {
        &self.record
    }

    pub fn id(&self) -> &BoxId {
        &self.record.id
    }

    pub fn ctx(&self) -> &'c Ctx {
        self.ctx
    }

    /// The runtime the box runs on.
    pub fn runtime(&self) -> Result<Arc<dyn Runtime>, OpError> {
        self.ctx.runtime_of(&self.record)
    }

    /// Reads the row again (after a write of another kind, e.g. pending limits applied).
    pub fn reload(&mut self) -> Result<&BoxRecord, OpError> {
        self.record = reload(self.ctx, &self.record.id)?;
        Ok(&self.record)
    }

    /// Moves the box to `to` at the generation this transition holds.
    pub fn write(&mut self, to: BoxState, reason: Option<&str>) -> Result<(), OpError> {
        let generation =
            self.ctx
                .store
                .update_box_state(&self.record.id, self.record.generation, to, reason)?;
        self.wrote(to, reason.map(str::to_owned), generation);
        Ok(())
    }

    /// Moves a stopped, failed or snapshotted box to `starting`, if its tenant's
    /// `max_running` has room.
    pub fn begin_start(&mut self) -> Result<(), OpError> {
        let generation = self
            .ctx
            .store
            .begin_start(&self.record.id, self.record.generation)?;
        self.wrote(BoxState::Starting, None, generation);
        Ok(())
    }

    /// Awaits `call`, the runtime's part of step `step`; if it fails, the failure is
    /// recorded (the box moved to `on_failure` with it, or left in its state when `None`)
    /// and the runtime's error returned.
    pub async fn run<T, E>(
        &mut self,
        step: Step,
        on_failure: Option<BoxState>,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E>
    where
        E: std::error::Error + 'static,
    {
        let result = call.await;
        if let Err(e) = &result {
            self.failed(step, e, on_failure);
        }
        result
    }

    /// Records that step `step` failed with `cause`: on the box, and in its state when
    /// `to` is given (`failed`, or `stopped` for a boot that is over). A record that cannot
    /// be written is logged: the caller's error is what the client hears.
    pub fn failed(&mut self, step: Step, cause: &dyn std::error::Error, to: Option<BoxState>) {
        let failure = TransitionFailure {
            transition: self.kind.as_str().to_owned(),
            step: step.as_str().to_owned(),
            cause: error_chain(cause),
            hint: step.hint(&self.record.name),
        };
        let id = &self.record.id;
        tracing::warn!(box_id = %id, name = %self.record.name, transition = failure.transition, step = failure.step, cause = failure.cause, "a box transition failed");
        let written = match to {
            Some(to) => self
                .ctx
                .store
                .fail_box_state(id, self.record.generation, to, &failure)
                .map(|generation| Some((to, generation))),
            None => self.ctx.store.record_failure(id, &failure).map(|()| None),
        };
        match written {
            Ok(Some((to, generation))) => {
                self.wrote(to, Some(failure.cause.clone()), generation);
                self.record.failure = Some(failure);
            }
            Ok(None) => self.record.failure = Some(failure),
            Err(e) => {
                tracing::error!(box_id = %id, error = %error_chain(&e), "cannot record a failed transition")
            }
        }
    }

    /// The box's row now, for the caller's answer; the lock is released.
    pub fn finish(self) -> Result<BoxRecord, OpError> {
        reload(self.ctx, &self.record.id)
    }

    fn wrote(&mut self, to: BoxState, reason: Option<String>, generation: u64) {
        let now = Instant::now();
        let metrics = &self.ctx.metrics.lifecycle;
        metrics.transition(self.record.state, to, now - self.since);
        self.since = now;
        self.record.state = to;
        self.record.state_reason = reason;
        self.record.generation = generation;
        self.record.failure = None;
    }
}
