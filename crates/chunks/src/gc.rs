//! Dropping what is no longer needed: old manifests (a volume keeps its newest few), whole
//! volumes, and then every chunk no manifest names, unless an upload may be about to name
//! it (the markers' protocol, in the crate docs). Also the store's usage.

use std::collections::{BTreeMap, HashSet};

use futures_util::StreamExt as _;
use object_store::path::Path as Key;

use crate::keys::{self, CHUNKS, VOLUMES};
use crate::manifest;
use crate::markers::{self, Marker, MarkerKind};
use crate::{ChunkError, ChunkStore};

/// Manifests read at once when a GC gathers the chunks they name.
const MANIFEST_READS: usize = 8;
/// Keys per delete request (S3's DeleteObjects takes 1000).
const DELETE_BATCH: usize = 1000;

/// What a GC did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    pub manifests_deleted: u64,
    pub chunks_deleted: u64,
    /// The compressed bytes of the deleted chunks.
    pub bytes_freed: u64,
    /// Chunks left because a kept manifest names them (0 when the sweep was skipped).
    pub chunks_kept: u64,
    /// An upload was running, so no chunk was looked at this round (manifests were still
    /// pruned). The next GC sweeps.
    pub skipped_for_upload: bool,
}

/// What the store holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub chunks: u64,
    /// The bytes of the chunks and manifests (markers aside).
    pub bytes: u64,
    pub manifests: u64,
}

impl ChunkStore {
    /// Keeps the newest `keep_per_volume` manifests of each volume (deleting older ones),
    /// then deletes every chunk no kept manifest names, unless an upload runs (then the
    /// sweep waits for the next GC: [`GcReport::skipped_for_upload`]). Keep 2 or more: see
    /// the crate docs.
    pub async fn gc(&self, keep_per_volume: usize) -> Result<GcReport, ChunkError> {
        gc(self, keep_per_volume).await
    }

    /// Deletes every manifest of `volume`; its chunks go at the next GC.
    pub async fn forget_volume(&self, volume: &str) -> Result<(), ChunkError> {
        forget_volume(self, volume).await
    }

    /// What the store holds.
    pub async fn usage(&self) -> Result<Usage, ChunkError> {
        usage(self).await
    }
}

async fn gc(store: &ChunkStore, keep_per_volume: usize) -> Result<GcReport, ChunkError> {
    if keep_per_volume == 0 {
        return Err(ChunkError::KeepNone);
    }
    let mut report = GcReport {
        manifests_deleted: prune_manifests(store, keep_per_volume).await?,
        ..GcReport::default()
    };
    let mut marker = Marker::write(store, MarkerKind::Gc).await?;
    let swept = sweep(store, &mut marker, &mut report).await;
    let removed = marker.remove().await;
    swept?;
    removed?;
    Ok(report)
}

/// Deletes all but the newest `keep` manifests of each volume; how many it deleted.
async fn prune_manifests(store: &ChunkStore, keep: usize) -> Result<u64, ChunkError> {
    let mut by_volume: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for meta in store.list("list the manifests in", VOLUMES).await? {
        if let Some((volume, generation)) = keys::parse_manifest_key(meta.location.as_ref()) {
            by_volume
                .entry(volume.to_owned())
                .or_default()
                .push(generation);
        }
    }
    let mut doomed = Vec::new();
    for (volume, mut generations) in by_volume {
        generations.sort_unstable_by(|a, b| b.cmp(a));
        doomed.extend(
            generations
                .into_iter()
                .skip(keep)
                .map(|generation| Key::from(keys::manifest_key(&volume, generation))),
        );
    }
    let deleted = doomed.len() as u64;
    for batch in chunked(doomed) {
        store.delete_all("delete the old manifests", batch).await?;
    }
    Ok(deleted)
}

/// With this GC's marker written: unless an upload runs, deletes every chunk that no
/// manifest names.
async fn sweep(
    store: &ChunkStore,
    marker: &mut Marker,
    report: &mut GcReport,
) -> Result<(), ChunkError> {
    if !markers::live_markers(store, MarkerKind::Upload)
        .await?
        .is_empty()
    {
        report.skipped_for_upload = true;
        return Ok(());
    }
    let named = named_chunks(store).await?;
    let mut doomed = Vec::new();
    let mut listing = store.list_stream("list the chunks in", CHUNKS);
    while let Some(meta) = listing.next().await {
        let meta = meta?;
        let Some(hash) = keys::parse_chunk_key(meta.location.as_ref()) else {
            continue;
        };
        if named.contains(hash) {
            report.chunks_kept += 1;
        } else {
            report.bytes_freed += meta.size;
            doomed.push(meta.location);
        }
    }
    drop(listing);
    for batch in chunked(doomed) {
        // Had an upload taken this GC for a crashed one, it may be storing chunks now.
        if !marker.keep_alive().await? {
            return Err(ChunkError::GcMarkerLost {
                key: marker.key().to_owned(),
            });
        }
        let count = batch.len() as u64;
        store.delete_all("delete the unnamed chunks", batch).await?;
        report.chunks_deleted += count;
    }
    Ok(())
}

/// The hashes every manifest in the store names. A manifest deleted since the listing is
/// skipped; one that cannot be read stops the GC, as what it names is unknown.
async fn named_chunks(store: &ChunkStore) -> Result<HashSet<String>, ChunkError> {
    let listed = store.list("list the manifests in", VOLUMES).await?;
    let manifests: Vec<(String, u64)> = listed
        .iter()
        .filter_map(|meta| keys::parse_manifest_key(meta.location.as_ref()))
        .map(|(volume, generation)| (volume.to_owned(), generation))
        .collect();
    let mut reads = futures_util::stream::iter(manifests)
        .map(|(volume, generation)| async move { manifest::read(store, &volume, generation).await })
        .buffer_unordered(MANIFEST_READS);
    let mut named = HashSet::new();
    while let Some(read) = reads.next().await {
        match read {
            Ok(manifest) => named.extend(
                manifest
                    .stored_chunks()
                    .map(|(_, chunk)| chunk.hash.clone()),
            ),
            Err(ChunkError::NoManifest { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(named)
}

async fn forget_volume(store: &ChunkStore, volume: &str) -> Result<(), ChunkError> {
    let doomed: Vec<Key> = manifest::generations(store, volume)
        .await?
        .into_iter()
        .map(|generation| Key::from(keys::manifest_key(volume, generation)))
        .collect();
    for batch in chunked(doomed) {
        store.delete_all("delete the manifests of", batch).await?;
    }
    if let Some(dir) = store.location().local_dir() {
        // Its directory, when empty: an upload writing a manifest there meanwhile keeps it.
        let _ = std::fs::remove_dir(dir.join(keys::volume_prefix(volume)));
    }
    Ok(())
}

async fn usage(store: &ChunkStore) -> Result<Usage, ChunkError> {
    let mut usage = Usage::default();
    let mut chunks = store.list_stream("list the chunks in", CHUNKS);
    while let Some(meta) = chunks.next().await {
        let meta = meta?;
        if keys::parse_chunk_key(meta.location.as_ref()).is_some() {
            usage.chunks += 1;
            usage.bytes += meta.size;
        }
    }
    for meta in store.list("list the manifests in", VOLUMES).await? {
        if keys::parse_manifest_key(meta.location.as_ref()).is_some() {
            usage.manifests += 1;
            usage.bytes += meta.size;
        }
    }
    Ok(usage)
}

/// `keys` in batches of [`DELETE_BATCH`].
fn chunked(keys: Vec<Key>) -> Vec<Vec<Key>> {
    let mut batches = Vec::new();
    let mut keys = keys.into_iter().peekable();
    while keys.peek().is_some() {
        batches.push(keys.by_ref().take(DELETE_BATCH).collect());
    }
    batches
}
