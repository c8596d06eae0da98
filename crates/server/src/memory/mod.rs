//! A box's memory as a host-side thing: its history (snapshots of `/memory` in the chunk
//! store, at each stop and on request; diffs; restores) and its search index (full text
//! and `[[links]]`, one index per box under its data dir). Reading memory without waking
//! the box is `ops::memory_read`, which both build on.

pub mod history;
pub(crate) mod index;
pub mod restore;
pub mod search;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_chunks::memory::MemoryHistory;
use berth_chunks::{ChunkStore, StoreConfig};
use berth_protocol::memory_history::Retention;
use berth_protocol::BoxId;

use crate::error::OpError;
use index::BoxIndex;

/// Where memory history goes without `[storage] url`: a chunk store in the data dir.
const LOCAL_HISTORY_DIR: &str = "memory-history";
/// Where each box's search index lives: `<data>/memory-index/<box id>/`, a cache that is
/// rebuilt from the box's memory when it is missing or damaged.
const INDEX_DIR: &str = "memory-index";
/// Open search indexes kept at once: each holds a writer lock and a few threads.
const OPEN_INDEXES: usize = 16;

/// The daemon's memory history and open search indexes.
pub struct Memory {
    pub history: MemoryHistory,
    pub retention: Retention,
    /// How often objects no snapshot names are deleted (`[storage] gc_interval_s`).
    gc_interval: Duration,
    data_dir: PathBuf,
    /// Open indexes, with the order they were last used in (for closing the oldest).
    indexes: Mutex<(HashMap<BoxId, Arc<BoxIndex>>, u64)>,
    /// One snapshot of a box at a time, so their order is their ids' order.
    snapshot_turns: Mutex<HashMap<BoxId, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory").finish_non_exhaustive()
    }
}

/// `dir`, made (or narrowed, if an older berth made it wider) to mode 0700.
fn private_dir(dir: &Path) -> Result<&Path, berth_chunks::ChunkError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let io = |source| berth_chunks::ChunkError::Io {
        action: "make the private directory",
        path: dir.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    Ok(dir)
}

impl Memory {
    /// History in `chunks` (the `[storage] url` store) when given, else in a directory of
    /// the data dir.
    pub fn open(
        data_dir: &Path,
        chunks: Option<&ChunkStore>,
        gc_interval: Duration,
        retention: Retention,
    ) -> Result<Memory, berth_chunks::ChunkError> {
        // Boxes' notes: for the daemon alone, as the rest of the data dir.
        private_dir(&data_dir.join(INDEX_DIR))?;
        let store = match chunks {
            Some(store) => store.clone(),
            None => ChunkStore::open(&StoreConfig {
                url: private_dir(&data_dir.join(LOCAL_HISTORY_DIR))?
                    .display()
                    .to_string(),
                credentials_file: None,
            })?,
        };
        Ok(Memory {
            history: store.memory(),
            retention,
            gc_interval,
            data_dir: data_dir.to_owned(),
            indexes: Mutex::new((HashMap::new(), 0)),
            snapshot_turns: Mutex::new(HashMap::new()),
        })
    }

    /// The box's search index, opened (or made) on first use.
    pub(crate) fn index(&self, id: &BoxId) -> Result<Arc<BoxIndex>, OpError> {
        let mut guard = self
            .indexes
            .lock()
            .expect("the index table is never poisoned");
        let (open, clock) = &mut *guard;
        *clock += 1;
        if let Some(index) = open.get(id) {
            index.touch(*clock);
            return Ok(index.clone());
        }
        if open.len() >= OPEN_INDEXES {
            if let Some(oldest) = open
                .iter()
                .min_by_key(|(_, i)| i.last_used())
                .map(|(id, _)| id.clone())
            {
                open.remove(&oldest);
            }
        }
        let index = Arc::new(BoxIndex::open(&self.index_dir(id), *clock)?);
        open.insert(id.clone(), index.clone());
        Ok(index)
    }

    fn index_dir(&self, id: &BoxId) -> PathBuf {
        self.data_dir.join(INDEX_DIR).join(id.to_string())
    }

    /// Closes and deletes the box's index.
    fn forget_index(&self, id: &BoxId) {
        self.indexes
            .lock()
            .expect("the index table is never poisoned")
            .0
            .remove(id);
        let dir = self.index_dir(id);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(box_id = %id, path = %dir.display(), error = %e, "cannot delete a deleted box's memory index");
            }
        }
    }

    /// Deletes the memory objects no snapshot names, every `gc_interval` (snapshots dropped
    /// by retention or with their box leave theirs behind until then). Several processes
    /// on one store may: the markers keep their sweeps safe.
    pub fn spawn_gc(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(this.gc_interval).await;
                match this.history.gc().await {
                    Ok(report) => tracing::info!(
                        deleted = report.objects_deleted,
                        bytes_freed = report.bytes_freed,
                        skipped_for_snapshot = report.skipped_for_upload,
                        "memory history collected"
                    ),
                    Err(e) => {
                        tracing::warn!(error = %berth_runtime::error_chain(&e), "the memory history's collection failed")
                    }
                }
            }
        })
    }

    /// Forgets a deleted box: its index, and its snapshots (their objects go at the next
    /// collection; a backup keeps its own copy).
    pub(crate) async fn forget_box(&self, id: &BoxId) {
        self.forget_index(id);
        let box_id = id.to_string();
        let dropped = async {
            let ids: Vec<String> = self
                .history
                .list(&box_id)
                .await?
                .into_iter()
                .map(|s| s.id)
                .collect();
            self.history.forget(&box_id, &ids).await
        };
        if let Err(e) = dropped.await {
            tracing::warn!(box_id = %id, error = %berth_runtime::error_chain(&e), "cannot delete a deleted box's memory snapshots");
        }
    }

    fn snapshot_turn(&self, id: &BoxId) -> Arc<tokio::sync::Mutex<()>> {
        self.snapshot_turns
            .lock()
            .expect("the turn table is never poisoned")
            .entry(id.clone())
            .or_default()
            .clone()
    }
}
