//! A box's memory through time: snapshots of its `/memory`, stored content-addressed
//! beside the volume chunks, so one changed file costs its own size and the listings of
//! the directories above it (about 50 compressed bytes an entry), not the tree's; and the
//! same file in two boxes is stored once.
//!
//! ```text
//! memory/blobs/<2 hex>/<sha256>         a file's bytes, zstd-compressed
//! memory/trees/<2 hex>/<sha256>         a directory: its entries in JSON, zstd-compressed
//! memory/boxes/<box>/<snapshot id>.json a snapshot: its root tree and what it holds
//! ```
//!
//! A tree is named by the hash of its JSON and written only after everything it names,
//! so a tree that is in the store is whole: a snapshot whose directory did not change
//! writes nothing for it. A snapshot writes an upload marker first and a GC skips its
//! sweep while one is live (the protocol of the crate docs), so a GC never deletes an
//! object a snapshot is about to name.

mod gc;
mod objects;
mod take;
mod tar_input;
mod transfer;
mod tree;

use std::collections::BTreeMap;

use berth_protocol::memory_history::{ChangeKind, MemoryChange, MemorySnapshot};

pub use gc::MemoryGcReport;
pub use tar_input::{read_tar, MemoryInput};
pub use transfer::{check_import, HistoryExport, HistoryImport, BLOBS_DIR, TREES_DIR};
pub use tree::{SnapshotFile, SnapshotFiles};

use crate::{ChunkError, ChunkStore};

/// The most one snapshot may hold, in file bytes: `/memory` is notes, and a snapshot is
/// read whole into the daemon's memory.
pub const MAX_SNAPSHOT_BYTES: u64 = 512 << 20;
/// The most files one snapshot may hold.
pub const MAX_SNAPSHOT_FILES: usize = 200_000;

/// A box's memory history in the chunk store. Cheap to clone.
#[derive(Clone, Debug)]
pub struct MemoryHistory {
    store: ChunkStore,
}

impl ChunkStore {
    pub fn memory(&self) -> MemoryHistory {
        MemoryHistory {
            store: self.clone(),
        }
    }
}

impl MemoryHistory {
    /// Every snapshot of `box_id`, oldest first.
    pub async fn list(&self, box_id: &str) -> Result<Vec<MemorySnapshot>, ChunkError> {
        objects::list_snapshots(&self.store, box_id).await
    }

    /// The newest snapshot of `box_id`, or None.
    pub async fn latest(&self, box_id: &str) -> Result<Option<MemorySnapshot>, ChunkError> {
        objects::latest_snapshot(&self.store, box_id).await
    }

    /// The snapshot `id` of `box_id`, or None.
    pub async fn get(&self, box_id: &str, id: &str) -> Result<Option<MemorySnapshot>, ChunkError> {
        objects::get_snapshot(&self.store, box_id, id).await
    }

    /// Every file and directory of `snapshot`, by path.
    pub async fn files(&self, snapshot: &MemorySnapshot) -> Result<SnapshotFiles, ChunkError> {
        tree::walk(&self.store, &snapshot.root).await
    }

    /// The bytes of a file a snapshot holds, checked against its hash.
    pub async fn read(&self, file: &SnapshotFile) -> Result<bytes::Bytes, ChunkError> {
        objects::get_blob(&self.store, &file.hash, file.size).await
    }

    /// Drops the snapshots `ids` of `box_id` (their objects go at the next [`Self::gc`]).
    pub async fn forget(&self, box_id: &str, ids: &[String]) -> Result<(), ChunkError> {
        objects::delete_snapshots(&self.store, box_id, ids).await
    }

    /// Writes `record` as a snapshot of `box_id` whose objects are already in the store
    /// (a restored backup brings its objects first).
    pub async fn adopt(&self, box_id: &str, record: &MemorySnapshot) -> Result<(), ChunkError> {
        objects::put_snapshot(&self.store, box_id, record).await
    }

    /// Deletes every memory object that no snapshot of any box names, unless a snapshot
    /// is being taken (then the next GC does).
    pub async fn gc(&self) -> Result<MemoryGcReport, ChunkError> {
        gc::gc(&self.store).await
    }
}

pub use take::TakeSnapshot;

/// The hash a snapshot names a file's bytes by (sha256, lowercase hex).
pub fn content_hash(content: &[u8]) -> String {
    objects::sha256_hex(content)
}

/// What changed from `from` to `to`, files only, by path.
pub fn diff(from: &SnapshotFiles, to: &SnapshotFiles) -> Vec<MemoryChange> {
    let files = |s: &SnapshotFiles| -> BTreeMap<String, SnapshotFile> {
        s.iter()
            .filter(|(_, f)| !f.is_dir)
            .map(|(p, f)| (p.clone(), f.clone()))
            .collect()
    };
    let (a, b) = (files(from), files(to));
    let mut changes = Vec::new();
    for (path, before) in &a {
        match b.get(path) {
            None => changes.push(change(path, ChangeKind::Removed, Some(before), None)),
            Some(after) if after.hash != before.hash => changes.push(change(
                path,
                ChangeKind::Modified,
                Some(before),
                Some(after),
            )),
            Some(_) => {}
        }
    }
    for (path, after) in &b {
        if !a.contains_key(path) {
            changes.push(change(path, ChangeKind::Added, None, Some(after)));
        }
    }
    changes.sort_by(|x, y| x.path.cmp(&y.path));
    changes
}

fn change(
    path: &str,
    change: ChangeKind,
    before: Option<&SnapshotFile>,
    after: Option<&SnapshotFile>,
) -> MemoryChange {
    MemoryChange {
        path: path.to_owned(),
        change,
        size_before: before.map(|f| f.size),
        size_after: after.map(|f| f.size),
        patch: None,
    }
}
