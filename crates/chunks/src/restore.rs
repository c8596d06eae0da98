//! Restoring an image from its manifest, so that `dest` is either the whole verified image
//! or untouched.
//!
//! The image is written through [`berth_basics::write_atomically_with`]: into a new
//! temporary file beside `dest`, sized to the image first (so the chunks the manifest has
//! none for stay holes), fsync'd, then renamed over `dest`. The writing runs on one
//! blocking thread that takes verified chunks from a short queue; meanwhile up to
//! [`IN_FLIGHT`] chunks are fetched, decompressed and checked against their hash. The
//! first bad, missing or unwritable chunk stops it all: the queue closes without its last
//! word, the writer fails, and the temporary file is removed before `restore` returns.
//! A dropped (cancelled) restore closes the queue the same way.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use futures_util::StreamExt as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;

use crate::error::CorruptChunk;
use crate::keys::chunk_key;
use crate::store::Fetched;
use crate::worker::blocking;
use crate::{ChunkError, ChunkRef, ChunkStore, Manifest, Progress};

/// Chunks fetched and verified at once.
const IN_FLIGHT: usize = 4;
/// Verified chunks waiting for the writer.
const WRITE_QUEUE: usize = 2;
/// A restored image is readable by its owner only, as the runtime makes volume images.
const IMAGE_MODE: u32 = 0o600;

/// What a restore wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Restored {
    /// Bytes of the image written from chunks (uncompressed; holes not counted).
    pub bytes: u64,
    /// Chunks fetched.
    pub chunks: u64,
    /// Compressed bytes fetched from the store.
    pub bytes_fetched: u64,
}

/// What the fetching side hands the writer.
enum Piece {
    Chunk {
        offset: u64,
        data: Vec<u8>,
    },
    /// Every chunk was sent: the writer may commit.
    Done,
}

/// Why the fetching side stopped early.
enum Stop {
    Failed(ChunkError),
    /// The writer failed: its error is the one to report.
    WriterGone,
}

impl ChunkStore {
    /// Writes the image `manifest` describes to `dest`, whole and verified or not at all:
    /// into a temporary file beside it (sparse: empty chunks stay holes), each chunk checked
    /// against its hash, fsync'd, renamed over `dest`. On any error `dest` is untouched and
    /// the temporary file removed; a bad or missing chunk is a [`ChunkError::Corrupt`] or
    /// [`ChunkError::Missing`] naming the volume, generation, chunk index and hash.
    pub async fn restore(
        &self,
        manifest: &Manifest,
        dest: &Path,
        progress: &(dyn Fn(Progress) + Send + Sync),
    ) -> Result<Restored, ChunkError> {
        restore(self, manifest, dest, progress).await
    }
}

async fn restore(
    store: &ChunkStore,
    manifest: &Manifest,
    dest: &Path,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<Restored, ChunkError> {
    manifest.check()?;
    let (pieces, incoming) = mpsc::channel(WRITE_QUEUE);
    let writer = {
        let (dest, size) = (dest.to_owned(), manifest.size);
        tokio::task::spawn_blocking(move || {
            berth_basics::write_atomically_with(&dest, IMAGE_MODE, |file| {
                write_pieces(file, size, incoming)
            })
        })
    };
    let mut fetched = fetch_all(store, manifest, &pieces, progress).await;
    if fetched.is_ok() && pieces.send(Piece::Done).await.is_err() {
        fetched = Err(Stop::WriterGone);
    }
    drop(pieces);
    let written = writer.await.map_err(|source| ChunkError::Worker {
        action: "write the restored image",
        source,
    });
    let write_error = |source| ChunkError::Io {
        action: "write the restored image to",
        path: dest.to_owned(),
        source,
    };
    match (fetched, written) {
        (Err(Stop::Failed(e)), _) => Err(e),
        (_, Err(e)) => Err(e),
        (_, Ok(Err(e))) => Err(write_error(e)),
        (Err(Stop::WriterGone), Ok(Ok(()))) => Err(write_error(io::Error::other(
            "the writer stopped before the last chunk",
        ))),
        (Ok(restored), Ok(Ok(()))) => Ok(restored),
    }
}

/// The writer: sizes the file, writes each chunk where it goes, and succeeds only once
/// told that every chunk was sent.
fn write_pieces(file: &mut File, size: u64, mut incoming: mpsc::Receiver<Piece>) -> io::Result<()> {
    file.set_len(size)?;
    loop {
        match incoming.blocking_recv() {
            Some(Piece::Chunk { offset, data }) => file.write_all_at(&data, offset)?,
            Some(Piece::Done) => return Ok(()),
            None => {
                return Err(io::Error::other(
                    "the restore stopped before its last chunk",
                ))
            }
        }
    }
}

async fn fetch_all(
    store: &ChunkStore,
    manifest: &Manifest,
    pieces: &mpsc::Sender<Piece>,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<Restored, Stop> {
    let total = manifest.size;
    let holes: u64 = (0u64..)
        .zip(&manifest.chunks)
        .filter(|(_, chunk)| chunk.is_none())
        .map(|(index, _)| {
            let range = manifest.chunk_range(index);
            range.end - range.start
        })
        .sum();
    let mut done = holes;
    progress(Progress { done, total });
    let mut restored = Restored {
        bytes: 0,
        chunks: 0,
        bytes_fetched: 0,
    };
    // Owned items: a closure taking a borrowed chunk makes this future `Send` only for one
    // lifetime, which a caller that spawns it (the daemon) cannot use.
    let wanted: Vec<(u64, ChunkRef)> = manifest
        .stored_chunks()
        .map(|(index, chunk)| (index, chunk.clone()))
        .collect();
    let mut fetches = futures_util::stream::iter(wanted)
        .map(|(index, chunk)| async move { fetch_chunk(store, manifest, index, &chunk).await })
        .buffer_unordered(IN_FLIGHT);
    while let Some(fetched) = fetches.next().await {
        let (offset, data, stored) = fetched.map_err(Stop::Failed)?;
        let length = data.len() as u64;
        pieces
            .send(Piece::Chunk { offset, data })
            .await
            .map_err(|_| Stop::WriterGone)?;
        restored.bytes += length;
        restored.chunks += 1;
        restored.bytes_fetched += stored;
        done += length;
        progress(Progress { done, total });
    }
    Ok(restored)
}

/// Chunk `index`, fetched and verified: its offset, its bytes and its stored size.
async fn fetch_chunk(
    store: &ChunkStore,
    manifest: &Manifest,
    index: u64,
    chunk: &ChunkRef,
) -> Result<(u64, Vec<u8>, u64), ChunkError> {
    let range = manifest.chunk_range(index);
    let expected = range.end - range.start;
    let corrupt = |why| ChunkError::Corrupt {
        volume: manifest.volume.clone(),
        generation: manifest.generation,
        index,
        hash: chunk.hash.clone(),
        why,
    };
    // zstd's worst case for incompressible bytes: anything longer is not our chunk.
    let limit = zstd::zstd_safe::compress_bound(expected as usize) as u64;
    let compressed = match store
        .get("fetch the chunk", &chunk_key(&chunk.hash), limit)
        .await?
    {
        Some(Fetched::Bytes(bytes)) => bytes,
        Some(Fetched::TooLarge(found)) => {
            return Err(corrupt(CorruptChunk::Oversized { found, limit }))
        }
        None => {
            return Err(ChunkError::Missing {
                volume: manifest.volume.clone(),
                generation: manifest.generation,
                index,
                hash: chunk.hash.clone(),
            })
        }
    };
    let stored = compressed.len() as u64;
    let hash = chunk.hash.clone();
    let verified = blocking("decompress a chunk", move || {
        Ok(decompress_and_verify(&compressed, expected, &hash))
    })
    .await?;
    let data = verified.map_err(corrupt)?;
    Ok((range.start, data, stored))
}

/// The chunk's bytes when they decompress to `expected` bytes that hash to `hash`.
fn decompress_and_verify(
    compressed: &[u8],
    expected: u64,
    hash: &str,
) -> Result<Vec<u8>, CorruptChunk> {
    let data = zstd::bulk::decompress(compressed, expected as usize)
        .map_err(|zstd| CorruptChunk::NotZstd { expected, zstd })?;
    if data.len() as u64 != expected {
        return Err(CorruptChunk::WrongLength {
            found: data.len() as u64,
            expected,
        });
    }
    let found = berth_basics::hex(&Sha256::digest(&data));
    if found != hash {
        return Err(CorruptChunk::HashMismatch { found });
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_verified_after_decompression() {
        let data = b"some chunk bytes".repeat(100);
        let hash = berth_basics::hex(&Sha256::digest(&data));
        let compressed = zstd::bulk::compress(&data, 3).unwrap();
        let len = data.len() as u64;
        assert_eq!(
            decompress_and_verify(&compressed, len, &hash).unwrap(),
            data
        );

        let other = berth_basics::hex(&Sha256::digest(b"other"));
        assert!(matches!(
            decompress_and_verify(&compressed, len, &other),
            Err(CorruptChunk::HashMismatch { .. })
        ));
        assert!(matches!(
            decompress_and_verify(&compressed, len + 1, &hash),
            Err(CorruptChunk::WrongLength { .. })
        ));
        assert!(matches!(
            decompress_and_verify(&compressed, len - 1, &hash),
            Err(CorruptChunk::NotZstd { .. })
        ));
        assert!(matches!(
            decompress_and_verify(b"not zstd at all", len, &hash),
            Err(CorruptChunk::NotZstd { .. })
        ));
    }
}
