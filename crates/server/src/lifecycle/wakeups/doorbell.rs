//! The wakeup limits and the scheduler's doorbell, shared through the daemon's `Ctx`.

use std::sync::Arc;

use tokio::sync::Notify;

use super::config::WakeupsHostConfig;

/// The limits, and the scheduler's doorbell.
#[derive(Debug)]
pub struct Wakeups {
    config: WakeupsHostConfig,
    changed: Notify,
}

impl Wakeups {
    pub fn new(config: &WakeupsHostConfig) -> Arc<Wakeups> {
        Arc::new(Wakeups {
            config: config.clone(),
            changed: Notify::new(),
        })
    }

    pub fn config(&self) -> &WakeupsHostConfig {
        &self.config
    }

    /// A wakeup was added or cancelled: the soonest slot may have changed.
    /// Rings when a wakeup was added or cancelled.
    pub(super) fn bell(&self) -> &Notify {
        &self.changed
    }

    pub fn changed(&self) {
        self.changed.notify_one();
    }
}
