//! The event pruner: in the background, never on a request's path, removes the oldest
//! events of every box over its byte budget or past its age (`[events]` in berth.toml).
//! It runs every `prune_every_s`, and sooner when a box's log grows well past its budget.

use std::sync::Arc;
use std::time::Duration;

use berth_store::{EventRetention, Store};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::host_config::EventsHostConfig;
use berth_runtime::error_chain;

const DAY: Duration = Duration::from_secs(24 * 3600);

#[derive(Debug)]
pub struct EventPruner {
    retention: EventRetention,
    every: Duration,
    wake: Notify,
}

impl EventPruner {
    pub fn new(config: &EventsHostConfig) -> EventPruner {
        EventPruner {
            retention: EventRetention {
                max_bytes_per_box: config.max_bytes_per_box,
                max_age: DAY * config.max_age_days as u32,
            },
            every: Duration::from_secs(config.prune_every_s),
            wake: Notify::new(),
        }
    }

    /// Told after events were stored, with the box's kept bytes: a box a quarter over its
    /// budget is pruned now rather than at the next tick (a quarter: not after every batch).
    pub fn stored(&self, kept_bytes: u64) {
        let budget = self.retention.max_bytes_per_box;
        if kept_bytes > budget.saturating_add(budget / 4) {
            self.wake.notify_one();
        }
    }

    /// Prunes until the task is aborted.
    pub fn spawn(self: Arc<Self>, store: Arc<Store>) -> JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let (store, retention) = (store.clone(), self.retention);
                match tokio::task::spawn_blocking(move || store.prune_events(retention)).await {
                    Ok(Ok(pruned)) if pruned.events > 0 => tracing::info!(
                        boxes = pruned.boxes,
                        events = pruned.events,
                        bytes = pruned.bytes,
                        "pruned old events"
                    ),
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => tracing::error!(error = %error_chain(&e), "cannot prune events"),
                    Err(e) => std::panic::resume_unwind(e.into_panic()),
                }
                tokio::select! {
                    _ = tokio::time::sleep(self.every) => {}
                    _ = self.wake.notified() => {}
                }
            }
        })
    }
}
