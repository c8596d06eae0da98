//! Manifests: what one generation of a volume is made of, chunk by chunk, as JSON at
//! `volumes/<volume>/<generation>.json`. Written last by an upload, so a manifest in the
//! store names only chunks that were stored before it.
//!
//! A manifest read from the store is checked before use (its key and contents agree, the
//! chunk count fits the size, every hash is a sha256): a restore never trusts one blindly.
//! Unknown fields are ignored, so a newer berth may add some.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::error::ManifestProblem;
use crate::keys::{self, manifest_key, volume_prefix};
use crate::store::Fetched;
use crate::{ChunkError, ChunkStore};

/// The largest manifest read into memory: 16 MiB is ~170,000 chunks, a 680 GiB image.
const MANIFEST_MAX_BYTES: u64 = 16 << 20;
/// The largest chunk a manifest may declare (and a restore holds in memory, a few at once).
pub(crate) const CHUNK_MAX_BYTES: u64 = 64 << 20;

/// One generation of a volume's image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub volume: String,
    pub generation: u64,
    /// The image's length in bytes.
    pub size: u64,
    /// The length of every chunk but the last, which may be shorter.
    pub chunk_size: u64,
    /// Chunk by chunk from offset 0; None for a chunk that is a hole or all zeros.
    pub chunks: Vec<Option<ChunkRef>>,
    pub created_unix: u64,
}

/// A stored chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Lowercase hex sha256 of the uncompressed chunk.
    pub hash: String,
    /// The compressed bytes stored.
    pub stored: u64,
}

impl Manifest {
    /// Where this manifest is (or goes) in the store.
    pub fn key(&self) -> String {
        manifest_key(&self.volume, self.generation)
    }

    /// The byte range `index` covers in the image.
    pub(crate) fn chunk_range(&self, index: u64) -> std::ops::Range<u64> {
        let start = index * self.chunk_size;
        start..(start + self.chunk_size).min(self.size)
    }

    /// The chunks of this manifest that are stored, with their index.
    pub(crate) fn stored_chunks(&self) -> impl Iterator<Item = (u64, &ChunkRef)> {
        (0u64..)
            .zip(&self.chunks)
            .filter_map(|(index, chunk)| Some((index, chunk.as_ref()?)))
    }

    /// Checks what a restore relies on: a plain volume name, a chunk size in bounds, as
    /// many chunks as the size needs, and sha256 hashes.
    pub(crate) fn check(&self) -> Result<(), ChunkError> {
        keys::check_volume(&self.volume)?;
        let bad = |reason| ChunkError::BadManifest {
            key: self.key(),
            reason,
        };
        if self.chunk_size == 0 || self.chunk_size > CHUNK_MAX_BYTES {
            return Err(bad(ManifestProblem::BadChunkSize {
                chunk_size: self.chunk_size,
                limit: CHUNK_MAX_BYTES,
            }));
        }
        let expected = self.size.div_ceil(self.chunk_size);
        if self.chunks.len() as u64 != expected {
            return Err(bad(ManifestProblem::ChunkCount {
                found: self.chunks.len() as u64,
                expected,
            }));
        }
        if let Some((index, chunk)) = self.stored_chunks().find(|(_, c)| !keys::is_hash(&c.hash)) {
            return Err(bad(ManifestProblem::BadHash {
                index,
                hash: chunk.hash.chars().take(80).collect(),
            }));
        }
        Ok(())
    }
}

impl ChunkStore {
    /// The manifest of `volume` at `generation`; [`ChunkError::NoManifest`] when absent.
    pub async fn manifest(&self, volume: &str, generation: u64) -> Result<Manifest, ChunkError> {
        read(self, volume, generation).await
    }

    /// The newest manifest of `volume`, None when it has none.
    pub async fn latest(&self, volume: &str) -> Result<Option<Manifest>, ChunkError> {
        latest(self, volume).await
    }

    /// The generations of `volume` in the store, oldest first.
    pub async fn generations(&self, volume: &str) -> Result<Vec<u64>, ChunkError> {
        generations(self, volume).await
    }
}

/// Seconds since the epoch by this machine's clock.
pub(crate) fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// Reads and checks the manifest of `volume` at `generation`.
pub(crate) async fn read(
    store: &ChunkStore,
    volume: &str,
    generation: u64,
) -> Result<Manifest, ChunkError> {
    keys::check_volume(volume)?;
    let key = manifest_key(volume, generation);
    let bad = |reason| ChunkError::BadManifest {
        key: key.clone(),
        reason,
    };
    let bytes = match store
        .get("read the manifest", &key, MANIFEST_MAX_BYTES)
        .await?
    {
        None => {
            return Err(ChunkError::NoManifest {
                volume: volume.to_owned(),
                generation,
            })
        }
        Some(Fetched::TooLarge(bytes)) => {
            return Err(bad(ManifestProblem::TooLarge {
                bytes,
                limit: MANIFEST_MAX_BYTES,
            }))
        }
        Some(Fetched::Bytes(bytes)) => bytes,
    };
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| bad(ManifestProblem::NotJson(e)))?;
    if manifest.volume != volume {
        return Err(bad(ManifestProblem::WrongVolume {
            found: manifest.volume.chars().take(140).collect(),
        }));
    }
    if manifest.generation != generation {
        return Err(bad(ManifestProblem::WrongGeneration {
            found: manifest.generation,
        }));
    }
    manifest.check()?;
    Ok(manifest)
}

pub(crate) async fn write(store: &ChunkStore, manifest: &Manifest) -> Result<(), ChunkError> {
    let json = serde_json::to_vec(manifest).map_err(|e| ChunkError::BadManifest {
        key: manifest.key(),
        reason: ManifestProblem::NotJson(e),
    })?;
    store
        .put("write the manifest", &manifest.key(), Bytes::from(json))
        .await
}

/// The generations of `volume` in the store, oldest first.
pub(crate) async fn generations(store: &ChunkStore, volume: &str) -> Result<Vec<u64>, ChunkError> {
    keys::check_volume(volume)?;
    let listed = store
        .list("list the manifests of", &volume_prefix(volume))
        .await?;
    let mut generations: Vec<u64> = listed
        .iter()
        .filter_map(|meta| keys::parse_manifest_key(meta.location.as_ref()))
        .filter(|(v, _)| *v == volume)
        .map(|(_, generation)| generation)
        .collect();
    generations.sort_unstable();
    Ok(generations)
}

/// The newest manifest of `volume`, None when it has none.
async fn latest(store: &ChunkStore, volume: &str) -> Result<Option<Manifest>, ChunkError> {
    // Newest first; one deleted between the listing and the read (a GC keeping fewer)
    // gives way to the next.
    for generation in generations(store, volume).await?.into_iter().rev() {
        match read(store, volume, generation).await {
            Ok(manifest) => return Ok(Some(manifest)),
            Err(ChunkError::NoManifest { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn manifest(size: u64, chunks: Vec<Option<ChunkRef>>) -> Manifest {
        Manifest {
            volume: "bx_a".into(),
            generation: 3,
            size,
            chunk_size: 4 << 20,
            chunks,
            created_unix: 1,
        }
    }

    fn stored(hash: &str) -> Option<ChunkRef> {
        Some(ChunkRef {
            hash: hash.into(),
            stored: 10,
        })
    }

    #[test]
    fn a_manifest_is_json_with_nulls_for_empty_chunks() {
        let m = manifest((4 << 20) + 1, vec![None, stored(HASH)]);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(
            json,
            format!(
                r#"{{"volume":"bx_a","generation":3,"size":4194305,"chunk_size":4194304,"chunks":[null,{{"hash":"{HASH}","stored":10}}],"created_unix":1}}"#
            )
        );
        assert_eq!(serde_json::from_str::<Manifest>(&json).unwrap(), m);
        m.check().unwrap();
        assert_eq!(m.chunk_range(1), (4 << 20)..(4 << 20) + 1);
        assert_eq!(m.key(), "volumes/bx_a/00000000000000000003.json");
    }

    #[test]
    fn a_manifest_that_does_not_add_up_is_refused() {
        let count = manifest(1, vec![]).check().unwrap_err();
        assert!(
            matches!(
                count,
                ChunkError::BadManifest {
                    reason: ManifestProblem::ChunkCount {
                        found: 0,
                        expected: 1
                    },
                    ..
                }
            ),
            "{count}"
        );
        let hash = manifest(1, vec![stored("ABC")]).check().unwrap_err();
        assert!(
            matches!(
                hash,
                ChunkError::BadManifest {
                    reason: ManifestProblem::BadHash { index: 0, .. },
                    ..
                }
            ),
            "{hash}"
        );
        let mut zero = manifest(0, vec![]);
        zero.chunk_size = 0;
        assert!(zero.check().is_err());
        let mut traversal = manifest(0, vec![]);
        traversal.volume = "../x".into();
        assert!(matches!(
            traversal.check().unwrap_err(),
            ChunkError::BadVolume { .. }
        ));
        manifest(0, vec![]).check().unwrap();
    }
}
