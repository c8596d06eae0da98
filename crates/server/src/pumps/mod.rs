//! The background tasks of a running box whose template has a harness: one delivers its queued messages to the harness
//! ([`delivery`]), one stores the harness's events ([`events`]). They start when a boot of
//! the box becomes running and stop (abort) when [`Pumps`] is dropped, which
//! `Live::end_boot` does on stop, delete, crash and shutdown: no task outlives its boot.

pub mod delivery;
pub mod events;

use std::time::Duration;

use berth_protocol::BoxId;
use berth_runtime::GuestClient;

use crate::boxes::Pumps;
use crate::ctx::Ctx;

/// First wait after a failed call; doubled up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Starts the pumps for boot `boot` of the box, talking to it through `client`: events
/// always (the box's journal also carries events of its own, a background process's exit),
/// delivery only for a boot that runs a harness (messages go to nothing else).
pub fn start(ctx: &Ctx, id: &BoxId, client: GuestClient, boot: u64, harness: bool) -> Pumps {
    let delivery =
        harness.then(|| tokio::spawn(delivery::run(ctx.clone(), id.clone(), client.clone(), boot)));
    let events = tokio::spawn(events::run(ctx.clone(), id.clone(), client));
    Pumps { delivery, events }
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
