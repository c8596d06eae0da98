//! The background tasks of a running box whose template has a harness: one delivers its queued messages to the harness
//! ([`delivery`]), one stores the harness's events ([`events`]). They start when a boot of
//! the box becomes running and stop (abort) when [`Pumps`] is dropped, which
//! `Live::end_boot` does on stop, delete, crash and shutdown: no task outlives its boot.

pub mod delivery;
pub mod events;

use std::time::Duration;

use berth_protocol::BoxId;
use berth_runtime::GuestClient;
use tokio::task::JoinHandle;

use crate::ctx::Ctx;

/// First wait after a failed call; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// The pumps of one boot. Dropping it aborts their tasks.
#[derive(Debug)]
pub struct Pumps {
    /// Only for a boot that runs a harness: messages go to nothing else.
    delivery: Option<JoinHandle<()>>,
    /// Always: the box's journal also carries events of its own (a background process's
    /// exit).
    events: JoinHandle<()>,
}

impl Pumps {
    /// Starts the pumps for boot `boot` of the box, talking to it through `client`.
    pub fn start(ctx: &Ctx, id: &BoxId, client: GuestClient, boot: u64, harness: bool) -> Pumps {
        let delivery = harness
            .then(|| tokio::spawn(delivery::run(ctx.clone(), id.clone(), client.clone(), boot)));
        let events = tokio::spawn(events::run(ctx.clone(), id.clone(), client));
        Pumps { delivery, events }
    }
}

impl Drop for Pumps {
    fn drop(&mut self) {
        if let Some(delivery) = &self.delivery {
            delivery.abort();
        }
        self.events.abort();
    }
}

/// Exponential backoff between retries of one pump.
#[derive(Debug)]
struct Backoff(Duration);

impl Backoff {
    fn new() -> Backoff {
        Backoff(FIRST_BACKOFF)
    }

    fn reset(&mut self) {
        self.0 = FIRST_BACKOFF;
    }

    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(MAX_BACKOFF);
    }
}
