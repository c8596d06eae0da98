//! The polled watchers (`CreateWatcher`) of every sandbox, by box and watcher id, with each
//! one's queue of events: the daemon's (`ctx.e2b`); a leaf. [`super::watchers`] fills and
//! drains it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use berth_e2b_wire::filesystem::FilesystemEvent;
use berth_protocol::BoxId;
use tokio::time::Instant;

/// Each sandbox's (box's) watchers by id.
pub type Registry = HashMap<BoxId, HashMap<String, Arc<Watcher>>>;

/// Every sandbox's watchers.
#[derive(Default)]
pub struct Watchers(Mutex<Registry>);

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchers").finish_non_exhaustive()
    }
}

impl Watchers {
    pub fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn forget(&self, box_id: &BoxId, watcher_id: &str) -> Option<Arc<Watcher>> {
        let mut all = self.registry();
        let watchers = all.get_mut(box_id)?;
        let removed = watchers.remove(watcher_id);
        if watchers.is_empty() {
            all.remove(box_id);
        }
        removed
    }
}

pub struct Watcher {
    pub queue: Arc<Mutex<Queue>>,
    pub task: tokio::task::AbortHandle,
}

pub struct Queue {
    pub events: VecDeque<FilesystemEvent>,
    pub dropped: u64,
    /// Why the watch ended, once it has.
    pub ended: Option<String>,
    pub last_read: Instant,
}

pub fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue.lock().unwrap_or_else(|p| p.into_inner())
}
