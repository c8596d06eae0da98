//! Uploading one generation of a volume: its chunks that the base does not name, then its
//! manifest.
//!
//! Each chunk is read (holes skipped), hashed and, when new, compressed on a blocking
//! thread, then PUT; [`IN_FLIGHT`] chunks at most are between read and stored, so memory
//! stays at a few chunks whatever the image's size. Results are taken in chunk order, so
//! progress counts the image from its start.
//!
//! A chunk is skipped only when `base` (or this upload, earlier) names it, never because
//! the store seems to have it: a chunk no manifest names may be swept by a GC at any time.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};

use crate::image::Image;
use crate::keys::{self, chunk_key};
use crate::manifest::{self, now_unix};
use crate::markers::{self, Marker, MarkerKind};
use crate::worker::blocking;
use crate::{ChunkError, ChunkRef, ChunkStore, Manifest, CHUNK_SIZE};

/// Chunks read, compressed or being PUT at once.
const IN_FLIGHT: usize = 4;
/// zstd's level for chunks: its default, fast with a fair ratio.
const ZSTD_LEVEL: i32 = 3;

/// What an upload did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uploaded {
    pub manifest: Manifest,
    /// Chunks PUT by this upload.
    pub chunks_uploaded: u64,
    /// Their compressed bytes.
    pub bytes_uploaded: u64,
    /// Chunks with data that were not PUT: the base, or this upload earlier, names them.
    pub chunks_reused: u64,
}

/// How far an upload or restore is, in bytes of the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    pub done: u64,
    pub total: u64,
}

/// The chunks this upload may name without storing them: the base's, then its own.
type Named = Arc<Mutex<HashMap<String, u64>>>;

/// One chunk after its blocking work.
enum Prepared {
    Empty,
    Named(ChunkRef),
    New { hash: String, compressed: Bytes },
}

impl ChunkStore {
    /// Uploads `image` (a file nobody writes meanwhile) as `generation` of `volume`:
    /// hashes each [`CHUNK_SIZE`] chunk (holes and zeros are no chunk, holes are not even
    /// read), stores (zstd level 3) those `base` does not name, then writes the manifest.
    /// `base` is the volume's newest manifest (see the crate docs for why that matters).
    /// `progress` is called with the bytes of the image done so far.
    pub async fn upload(
        &self,
        volume: &str,
        generation: u64,
        image: &Path,
        base: Option<&Manifest>,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Uploaded, ChunkError> {
        upload(self, volume, generation, image, base, progress).await
    }
}

async fn upload(
    store: &ChunkStore,
    volume: &str,
    generation: u64,
    image: &Path,
    base: Option<&Manifest>,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<Uploaded, ChunkError> {
    keys::check_volume(volume)?;
    if let Some(base) = base {
        base.check()?;
    }
    let image = {
        let path = image.to_owned();
        Arc::new(blocking("open the image", move || Image::open(&path)).await?)
    };
    let named: Named = Arc::new(Mutex::new(
        base.iter()
            .flat_map(|base| base.stored_chunks())
            .map(|(_, chunk)| (chunk.hash.clone(), chunk.stored))
            .collect(),
    ));
    let mut marker = Marker::write(store, MarkerKind::Upload).await?;
    let outcome = store_generation(
        store,
        &mut marker,
        volume,
        generation,
        image,
        named,
        progress,
    )
    .await;
    let removed = marker.remove().await;
    let uploaded = outcome?;
    removed?;
    Ok(uploaded)
}

/// Everything between writing the marker and removing it.
async fn store_generation(
    store: &ChunkStore,
    marker: &mut Marker,
    volume: &str,
    generation: u64,
    image: Arc<Image>,
    named: Named,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<Uploaded, ChunkError> {
    let marker_key = marker.key().to_owned();
    let lost = || ChunkError::MarkerLost {
        volume: volume.to_owned(),
        generation,
        key: marker_key.clone(),
    };
    if !markers::wait_while_gc_runs(store, marker).await? {
        return Err(lost());
    }
    let total = image.size();
    progress(Progress { done: 0, total });
    let mut outcomes = futures_util::stream::iter(0..image.chunk_count())
        .map(|index| store_chunk(store, image.clone(), index, named.clone()))
        .buffered(IN_FLIGHT);
    let mut chunks = Vec::with_capacity(image.chunk_count() as usize);
    let mut uploaded = Uploaded {
        manifest: Manifest {
            volume: volume.to_owned(),
            generation,
            size: total,
            chunk_size: CHUNK_SIZE,
            chunks: Vec::new(),
            created_unix: now_unix(),
        },
        chunks_uploaded: 0,
        bytes_uploaded: 0,
        chunks_reused: 0,
    };
    while let Some(outcome) = outcomes.next().await {
        let (chunk, put) = outcome?;
        match (&chunk, put) {
            (Some(chunk), true) => {
                uploaded.chunks_uploaded += 1;
                uploaded.bytes_uploaded += chunk.stored;
            }
            (Some(_), false) => uploaded.chunks_reused += 1,
            (None, _) => {}
        }
        chunks.push(chunk);
        let done = image.chunk_range(chunks.len() as u64 - 1).end;
        progress(Progress { done, total });
        if !marker.keep_alive().await? {
            return Err(lost());
        }
    }
    drop(outcomes);
    uploaded.manifest.chunks = chunks;
    // The last look before naming the chunks: had a GC taken the marker for stale, it may
    // have swept some of them.
    if !marker.still_there().await? {
        return Err(lost());
    }
    manifest::write(store, &uploaded.manifest).await?;
    Ok(uploaded)
}

/// Chunk `index`: None when empty, else its reference and whether this call PUT it.
async fn store_chunk(
    store: &ChunkStore,
    image: Arc<Image>,
    index: u64,
    named: Named,
) -> Result<(Option<ChunkRef>, bool), ChunkError> {
    let lookup = named.clone();
    let prepared = blocking("read and compress a chunk", move || {
        prepare(&image, index, &lookup)
    })
    .await?;
    match prepared {
        Prepared::Empty => Ok((None, false)),
        Prepared::Named(chunk) => Ok((Some(chunk), false)),
        Prepared::New { hash, compressed } => {
            let stored = compressed.len() as u64;
            store
                .put("store the chunk", &chunk_key(&hash), compressed)
                .await?;
            lock(&named).insert(hash.clone(), stored);
            Ok((Some(ChunkRef { hash, stored }), true))
        }
    }
}

/// The blocking part of a chunk: read it, hash it, and compress it unless it is named.
fn prepare(image: &Image, index: u64, named: &Named) -> Result<Prepared, ChunkError> {
    let Some(data) = image.read_chunk(index)? else {
        return Ok(Prepared::Empty);
    };
    let hash = berth_basics::hex(&Sha256::digest(&data));
    if let Some(&stored) = lock(named).get(&hash) {
        return Ok(Prepared::Named(ChunkRef { hash, stored }));
    }
    let compressed = zstd::bulk::compress(&data, ZSTD_LEVEL).map_err(|source| ChunkError::Io {
        action: "compress a chunk of",
        path: image.path().to_owned(),
        source,
    })?;
    Ok(Prepared::New {
        hash,
        compressed: Bytes::from(compressed),
    })
}

fn lock(named: &Named) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
    // The map is only ever inserted into whole entries: a panic elsewhere leaves it valid.
    named.lock().unwrap_or_else(PoisonError::into_inner)
}
