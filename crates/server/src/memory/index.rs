//! One box's open memory index (`berth_memory_index`, under the data dir) as the daemon
//! keeps it between questions (`Memory::index`); `search` brings it up to date and asks it.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use berth_memory_index::MemoryIndex;

use crate::error::OpError;

/// A running box's files as the last live refresh listed them.
pub(super) struct Seen {
    /// Path → (size, modified in whole seconds).
    pub(super) files: HashMap<String, (u64, i64)>,
    /// The host's clock (unix seconds) when that listing was taken.
    pub(super) at: i64,
}

/// One box's open index, and what its running box's last listing showed.
pub(crate) struct BoxIndex {
    pub(super) index: Arc<MemoryIndex>,
    last_used: AtomicU64,
    /// What the last live refresh saw; None: compare the whole tree by content at the next.
    pub(super) seen: Mutex<Option<Seen>>,
    /// One refresh at a time.
    pub(super) refresh: tokio::sync::Mutex<()>,
}

impl BoxIndex {
    pub(crate) fn open(dir: &Path, clock: u64) -> Result<BoxIndex, OpError> {
        let index = MemoryIndex::open(dir).map_err(OpError::MemoryIndex)?;
        if index.was_reset() {
            tracing::warn!(path = %dir.display(), "a memory index could not be opened and was made anew; it is rebuilt from the memory");
        }
        Ok(BoxIndex {
            index: Arc::new(index),
            last_used: AtomicU64::new(clock),
            seen: Mutex::new(None),
            refresh: tokio::sync::Mutex::new(()),
        })
    }

    pub(crate) fn touch(&self, clock: u64) {
        self.last_used.store(clock, Ordering::Relaxed);
    }

    pub(crate) fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    pub(crate) fn forget_seen(&self) {
        *self.seen.lock().expect("never poisoned") = None;
    }
}
