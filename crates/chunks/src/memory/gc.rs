//! Deleting the memory objects no snapshot names, by the markers' protocol of the crate
//! docs (a snapshot being taken is an upload: the sweep waits for the next GC).

use std::collections::HashSet;

use futures_util::StreamExt as _;

use super::objects::{self, BLOBS, TREES};
use super::tree;
use crate::markers::{self, Marker, MarkerKind};
use crate::{ChunkError, ChunkStore};

/// What a memory GC did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryGcReport {
    pub objects_deleted: u64,
    pub bytes_freed: u64,
    pub objects_kept: u64,
    /// A snapshot was being taken, so nothing was swept this round.
    pub skipped_for_upload: bool,
}

pub(crate) async fn gc(store: &ChunkStore) -> Result<MemoryGcReport, ChunkError> {
    let mut report = MemoryGcReport::default();
    let mut marker = Marker::write(store, MarkerKind::Gc).await?;
    let swept = sweep(store, &mut marker, &mut report).await;
    let removed = marker.remove().await;
    swept?;
    removed?;
    Ok(report)
}

async fn sweep(
    store: &ChunkStore,
    marker: &mut Marker,
    report: &mut MemoryGcReport,
) -> Result<(), ChunkError> {
    if !markers::live_markers(store, MarkerKind::Upload)
        .await?
        .is_empty()
    {
        report.skipped_for_upload = true;
        return Ok(());
    }
    let named = named_objects(store).await?;
    let mut doomed = Vec::new();
    for prefix in [BLOBS, TREES] {
        let mut listing = store.list_stream("list the memory objects in", prefix);
        while let Some(meta) = listing.next().await {
            let meta = meta?;
            let Some(hash) = objects::parse_key(prefix, meta.location.as_ref()) else {
                continue;
            };
            if named.contains(hash) {
                report.objects_kept += 1;
            } else {
                report.bytes_freed += meta.size;
                doomed.push(meta.location);
            }
        }
    }
    for batch in doomed.chunks(1000) {
        if !marker.keep_alive().await? {
            return Err(ChunkError::GcMarkerLost {
                key: marker.key().to_owned(),
            });
        }
        report.objects_deleted += batch.len() as u64;
        store
            .delete_all("delete the unnamed memory objects", batch.to_vec())
            .await?;
    }
    Ok(())
}

/// The hash of every tree and blob some snapshot names. A snapshot whose trees cannot be
/// read stops the GC: sweeping without them could delete what the rest of it names.
async fn named_objects(store: &ChunkStore) -> Result<HashSet<String>, ChunkError> {
    let mut named = HashSet::new();
    let mut trees_seen = HashSet::new();
    for key in objects::all_records(store).await? {
        let Some(record) = objects::read_record(store, &key).await? else {
            continue;
        };
        let mut todo = vec![record.root];
        while let Some(hash) = todo.pop() {
            if !trees_seen.insert(hash.clone()) {
                continue;
            }
            for entry in tree::read_tree(store, &hash).await?.entries {
                if entry.dir {
                    todo.push(entry.hash.clone());
                }
                named.insert(entry.hash);
            }
            named.insert(hash);
        }
    }
    Ok(named)
}
