//! Noticing at once that a running box ended on its own: its guest powered off, its kernel
//! panicked, its VMM was killed, the host's disk filled up. Each boot that becomes running
//! (a start or a reattach) gets an [`ExitWatch`] that awaits the runtime's `wait_exit`;
//! when that resolves while the boot is still the current one, the boot is ended and the
//! box recorded `stopped` ("the box shut itself down") or `failed` with the runtime's
//! reason. The state change is an event in the box's log, so `berth logs` and SSE readers
//! see it.
//!
//! A stop, idle reclaim or delete by the daemon ends the boot first (`Live::end_boot`),
//! which aborts the watch, so it is never taken for a crash. A call that races the watch
//! still finds a dead boot through `Lifecycle::forget_if_dead`.

use std::sync::Arc;
use std::time::Duration;

use berth_protocol::BoxId;
use berth_runtime::{BoxExit, Runtime};
use berth_store::BoxState;
use tokio::task::JoinHandle;

use crate::ctx::{Ctx, STOP_GRACE};
use crate::error::OpError;
use crate::lifecycle::transition::{runtime_error, Kind, Step, Transition};
use berth_runtime::error_chain;

/// The reason a box that powered itself off is `stopped` with.
pub const SHUT_ITSELF_DOWN: &str = "the box shut itself down";
/// The wait after the runtime could not say whether the box still runs.
const RETRY: Duration = Duration::from_secs(2);

/// The watch over one boot; dropping it (at the end of the boot) aborts it.
#[derive(Debug)]
pub struct ExitWatch(JoinHandle<()>);

impl ExitWatch {
    /// Watches boot `boot` of the box, which runs on `runtime`.
    pub fn start(ctx: &Ctx, id: &BoxId, runtime: Arc<dyn Runtime>, boot: u64) -> ExitWatch {
        let (ctx, id) = (ctx.clone(), id.clone());
        ExitWatch(tokio::spawn(async move {
            let exit = loop {
                match runtime.wait_exit(&id).await {
                    Ok(exit) => break exit,
                    Err(e) => {
                        tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot wait for the box's end; trying again");
                        tokio::time::sleep(RETRY).await;
                    }
                }
            };
            // In a task of its own: ending the boot drops this watch, which would abort
            // the task doing it half-way.
            tokio::spawn(async move {
                if let Err(e) = boot_ended(&ctx, &id, &runtime, boot, exit).await {
                    tracing::error!(box_id = %id, error = %error_chain(&e), "cannot record the end of the box's boot");
                }
            });
        }))
    }
}

impl Drop for ExitWatch {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Boot `boot` of the box ended as `exit`: if it is still the current boot, end it, clean
/// up what the runtime holds for it, and record the box's new state with the reason.
async fn boot_ended(
    ctx: &Ctx,
    id: &BoxId,
    runtime: &Arc<dyn Runtime>,
    boot: u64,
    exit: BoxExit,
) -> Result<(), OpError> {
    let mut t = Transition::begin(ctx, id, Kind::Exit).await?;
    // Stopped, deleted or started again meanwhile: that call has dealt with this boot.
    if t.live.boot != boot || t.live.client.is_none() {
        return Ok(());
    }
    if !matches!(t.record().state, BoxState::Running | BoxState::Paused) {
        return Ok(());
    }
    t.live.end_boot();
    ctx.egress.end(id);
    // Sockets, pid files and any helper process of the boot go now, not at the next call.
    t.run(
        Step::RuntimeStop,
        Some(BoxState::Failed),
        runtime.stop(id, STOP_GRACE),
    )
    .await
    .map_err(|source| runtime_error("stop", id, source))?;
    let name = t.record().name.clone();
    match exit {
        BoxExit::Clean => {
            t.write(BoxState::Stopped, Some(SHUT_ITSELF_DOWN))?;
            tracing::info!(box_id = %id, name = %name, "the box shut itself down");
        }
        BoxExit::Crashed(reason) => {
            t.write(BoxState::Failed, Some(&reason))?;
            tracing::warn!(box_id = %id, name = %name, reason = %reason, "the box ended unexpectedly");
        }
    }
    Ok(())
}
