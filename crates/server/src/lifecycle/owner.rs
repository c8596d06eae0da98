//! [`Lifecycle`], the one owner of every box's lifecycle (see the module's overview).

use std::future::Future;

use berth_protocol::BoxId;
use berth_runtime::{GuestClient, GuestError};
use berth_store::{BoxRecord, NewBox};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::templates::Template;

use super::{restore_copy, sleep, stop, wake, warm_pool};
use crate::cluster::op_kind as op;
use crate::cluster::remote;

/// The owner of every box's lifecycle, borrowed from the daemon's [`Ctx`].
#[derive(Clone, Copy)]
pub struct Lifecycle<'a> {
    ctx: &'a Ctx,
}

impl Ctx {
    pub fn lifecycle(&self) -> Lifecycle<'_> {
        Lifecycle { ctx: self }
    }
}

impl Lifecycle<'_> {
    /// Wakes the box by its cheapest rung (`POST /start`, and every call that needs it);
    /// returns its row, `running`.
    pub async fn start(self, id: &BoxId) -> Result<BoxRecord, OpError> {
        if self.on_nodes() {
            return remote::run(self.ctx, id, op::START).await;
        }
        wake::start_box(self.ctx, id, wake::Waker::Caller).await
    }

    /// The guest client of the running box and its boot number, waking it first. A box
    /// asleep with `auto_resume` off is refused ([`OpError::Asleep`]).
    pub async fn wake(self, id: &BoxId) -> Result<(GuestClient, u64), OpError> {
        wake::ensure_running(self.ctx, id, wake::Waker::Call).await
    }

    /// Wakes the box for its queued messages in the background (a post, a scheduled
    /// wakeup). A box asleep with `auto_resume` off keeps them until it is resumed.
    pub fn wake_for_messages(self, id: &BoxId) {
        if self.on_nodes() {
            return self.wake_remotely(id);
        }
        wake::wake_for_messages(self.ctx, id, wake::Waker::Call);
    }

    /// Wakes the box for a scheduled wakeup's message in the background, whatever its
    /// `auto_resume`: the wakeup is someone's explicit wish that it wake.
    pub fn wake_for_wakeup(self, id: &BoxId) {
        if self.on_nodes() {
            return self.wake_remotely(id);
        }
        wake::wake_for_messages(self.ctx, id, wake::Waker::Caller);
    }

    /// Runs `call` against the box's agent, waking the box first; a call that found the
    /// box's processes dead is made once more on a new boot.
    pub async fn with_guest<T, F, Fut>(self, id: &BoxId, call: F) -> Result<T, OpError>
    where
        F: Fn(GuestClient) -> Fut,
        Fut: Future<Output = Result<T, GuestError>>,
    {
        wake::with_guest(self.ctx, id, call).await
    }

    /// After boot `boot` could not be reached: if that boot is over, records it and wakes
    /// the box again in the background so its queue drains (the pumps call this).
    pub fn wake_if_dead(self, id: &BoxId, boot: u64) {
        wake::wake_if_dead(self.ctx, id, boot);
    }

    /// `true` when boot `boot` of the box is over (recorded as stopped if it died).
    pub async fn forget_if_dead(self, id: &BoxId, boot: u64) -> Result<bool, OpError> {
        wake::forget_if_dead(self.ctx, id, boot).await
    }

    /// Stops the box (its processes end, its disk stays, a snapshot is deleted).
    pub async fn stop(self, id: &BoxId) -> Result<BoxRecord, OpError> {
        if self.on_nodes() {
            return remote::run(self.ctx, id, op::STOP).await;
        }
        sleep::descend(self.ctx, id, sleep::Rung::Stop).await
    }

    /// Stops the box and leaves it `failed` with `reason` (its harness gave up).
    pub async fn fail(self, id: &BoxId, reason: &str) -> Result<(), OpError> {
        stop::fail_box(self.ctx, id, reason).await
    }

    /// Freezes every process of the running box in memory.
    pub async fn pause(self, id: &BoxId) -> Result<BoxRecord, OpError> {
        if self.on_nodes() {
            return remote::run(self.ctx, id, op::PAUSE).await;
        }
        sleep::descend(self.ctx, id, sleep::Rung::Pause).await
    }

    /// Wakes a paused or snapshotted box, whatever its `auto_resume` (`POST /resume`).
    pub async fn resume(self, id: &BoxId) -> Result<BoxRecord, OpError> {
        if self.on_nodes() {
            return remote::run(self.ctx, id, op::RESUME).await;
        }
        wake::start_box(self.ctx, id, wake::Waker::Caller).await
    }

    /// A booted box of `template`'s warm pool, moved over to be `new` (`warm_pool`); `None`
    /// when the pool has none ready or `new` asks for something its boxes were not booted
    /// with.
    pub async fn claim_warm(self, new: &NewBox, template: &Template) -> Option<BoxRecord> {
        warm_pool::claim(self.ctx, new, template).await
    }

    /// Saves the running or paused box's memory to disk and ends its VMM.
    pub async fn snapshot(self, id: &BoxId) -> Result<BoxRecord, OpError> {
        if self.on_nodes() {
            return remote::run(self.ctx, id, op::SNAPSHOT).await;
        }
        sleep::descend(self.ctx, id, sleep::Rung::Snapshot).await
    }

    /// Puts the stopped box's volume back from its durable copy `generation` (else its
    /// newest). Through an API replica, only the newest: the op carries no argument.
    pub async fn restore_from_copy(
        self,
        id: &BoxId,
        generation: Option<u64>,
    ) -> Result<BoxRecord, OpError> {
        if self.on_nodes() {
            if generation.is_some() {
                return Err(OpError::OnNode {
                    status: 400,
                    code: berth_protocol::ErrorCode::InvalidRequest,
                    message: "through an API replica a box is restored from its newest copy only: leave out generation".into(),
                });
            }
            return remote::run(self.ctx, id, op::RESTORE).await;
        }
        restore_copy::restore_from_copy(self.ctx, id, generation).await
    }

    /// Whether the boxes live on nodes and this daemon is an API replica: each verb is an
    /// op for the box's node (`cluster::remote`).
    fn on_nodes(self) -> bool {
        self.ctx.role.api().is_some()
    }

    /// Queues a wake for the box's node in the background. The messages are stored
    /// already: a wake that cannot be queued (the node is gone, another op is open) is
    /// made up for by the node, which wakes its boxes with queued messages when it starts
    /// and after each op.
    fn wake_remotely(self, id: &BoxId) {
        let (ctx, id) = (self.ctx.clone(), id.clone());
        tokio::spawn(async move {
            if let Err(e) = remote::queue(&ctx, &id, op::WAKE).await {
                tracing::info!(box_id = %id, error = %berth_runtime::error_chain(&e), "no wake queued for the box's node");
            }
        });
    }
}
