//! The memory objects' keys, and putting and getting them: blobs and trees compressed and
//! checked against their hash on the way back, snapshot records as JSON.

use berth_protocol::memory_history::MemorySnapshot;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::keys::is_hash;
use crate::store::Fetched;
use crate::{ChunkError, ChunkStore};

pub(crate) const BLOBS: &str = "memory/blobs";
pub(crate) const TREES: &str = "memory/trees";
pub(crate) const BOXES: &str = "memory/boxes";

const ZSTD_LEVEL: i32 = 3;
/// A snapshot record is a few hundred bytes.
const RECORD_MAX_BYTES: u64 = 64 * 1024;
/// The largest tree object read back (a directory of 100,000 entries is a few MiB).
pub(crate) const TREE_MAX_BYTES: u64 = 64 << 20;

pub(crate) fn sha256_hex(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let mut hex = String::with_capacity(64);
    for b in digest {
        hex.push_str(&format!("{b:02x}"));
    }
    hex
}

pub(crate) fn blob_key(hash: &str) -> String {
    format!("{BLOBS}/{}/{hash}", &hash[..2])
}

pub(crate) fn tree_key(hash: &str) -> String {
    format!("{TREES}/{}/{hash}", &hash[..2])
}

fn record_key(box_id: &str, id: &str) -> String {
    format!("{BOXES}/{box_id}/{id}.json")
}

/// A snapshot id: `ms_` and 15 digits of milliseconds, so ids sort as times.
pub(crate) fn snapshot_id(unix_ms: u64) -> String {
    format!("ms_{unix_ms:015}")
}

pub(crate) fn is_snapshot_id(id: &str) -> bool {
    id.strip_prefix("ms_")
        .is_some_and(|d| d.len() == 15 && d.bytes().all(|b| b.is_ascii_digit()))
}

/// The hash of an object's key under `prefix`, if the key is one.
pub(crate) fn parse_key<'k>(prefix: &str, key: &'k str) -> Option<&'k str> {
    let rest = key.strip_prefix(prefix)?.strip_prefix('/')?;
    let (shard, hash) = rest.split_once('/')?;
    (is_hash(hash) && hash.starts_with(shard) && shard.len() == 2).then_some(hash)
}

/// Stores `data` compressed under `key`; the compressed size.
pub(crate) async fn put_compressed(
    store: &ChunkStore,
    op: &'static str,
    key: &str,
    data: &[u8],
) -> Result<u64, ChunkError> {
    let compressed = zstd::bulk::compress(data, ZSTD_LEVEL).map_err(|source| ChunkError::Io {
        action: "compress a memory object for",
        path: key.into(),
        source,
    })?;
    let size = compressed.len() as u64;
    store.put(op, key, Bytes::from(compressed)).await?;
    Ok(size)
}

/// The object at `key` decompressed (at most `size` bytes) and checked against `hash`.
async fn get_checked(
    store: &ChunkStore,
    op: &'static str,
    key: &str,
    hash: &str,
    size: u64,
) -> Result<Bytes, ChunkError> {
    let limit = zstd::zstd_safe::compress_bound(size as usize) as u64 + 64;
    let compressed = match store.get(op, key, limit).await? {
        Some(Fetched::Bytes(b)) => b,
        Some(Fetched::TooLarge(_)) | None => {
            return Err(ChunkError::MemoryObject {
                key: key.to_owned(),
                why: "missing from the store, or larger than its entry says",
            })
        }
    };
    let data = zstd::bulk::decompress(&compressed, size as usize).map_err(|_| {
        ChunkError::MemoryObject {
            key: key.to_owned(),
            why: "not zstd of the size its entry says",
        }
    })?;
    if sha256_hex(&data) != hash {
        return Err(ChunkError::MemoryObject {
            key: key.to_owned(),
            why: "its bytes do not match its hash",
        });
    }
    Ok(Bytes::from(data))
}

pub(crate) async fn get_blob(
    store: &ChunkStore,
    hash: &str,
    size: u64,
) -> Result<Bytes, ChunkError> {
    get_checked(store, "read the memory file", &blob_key(hash), hash, size).await
}

pub(crate) async fn get_tree(store: &ChunkStore, hash: &str) -> Result<Bytes, ChunkError> {
    let key = tree_key(hash);
    // A tree's size is not in its parent: bound it by the largest tree instead.
    get_checked(store, "read the memory tree", &key, hash, TREE_MAX_BYTES).await
}

pub(crate) async fn put_snapshot(
    store: &ChunkStore,
    box_id: &str,
    record: &MemorySnapshot,
) -> Result<(), ChunkError> {
    crate::check_volume(box_id)?;
    let json = serde_json::to_vec(record).expect("a snapshot serializes");
    store
        .put(
            "write the memory snapshot",
            &record_key(box_id, &record.id),
            Bytes::from(json),
        )
        .await
}

pub(crate) async fn get_snapshot(
    store: &ChunkStore,
    box_id: &str,
    id: &str,
) -> Result<Option<MemorySnapshot>, ChunkError> {
    crate::check_volume(box_id)?;
    if !is_snapshot_id(id) {
        return Ok(None);
    }
    let key = record_key(box_id, id);
    match store
        .get("read the memory snapshot", &key, RECORD_MAX_BYTES)
        .await?
    {
        None => Ok(None),
        Some(Fetched::TooLarge(_)) => Err(bad_record(&key)),
        Some(Fetched::Bytes(b)) => serde_json::from_slice(&b)
            .ok()
            .filter(|s: &MemorySnapshot| s.id == id && is_hash(&s.root))
            .map(Some)
            .ok_or_else(|| bad_record(&key)),
    }
}

fn bad_record(key: &str) -> ChunkError {
    ChunkError::MemoryObject {
        key: key.to_owned(),
        why: "not a snapshot record",
    }
}

/// The ids of `box_id`'s snapshots, oldest first.
async fn snapshot_ids(store: &ChunkStore, box_id: &str) -> Result<Vec<String>, ChunkError> {
    crate::check_volume(box_id)?;
    let prefix = format!("{BOXES}/{box_id}");
    let mut ids: Vec<String> = store
        .list("list the memory snapshots in", &prefix)
        .await?
        .into_iter()
        .filter_map(|meta| {
            let name = meta.location.filename()?.strip_suffix(".json")?.to_owned();
            is_snapshot_id(&name).then_some(name)
        })
        .collect();
    ids.sort();
    Ok(ids)
}

/// The newest snapshot of `box_id` that reads back whole.
pub(crate) async fn latest_snapshot(
    store: &ChunkStore,
    box_id: &str,
) -> Result<Option<MemorySnapshot>, ChunkError> {
    for id in snapshot_ids(store, box_id).await?.iter().rev() {
        if let Ok(Some(s)) = get_snapshot(store, box_id, id).await {
            return Ok(Some(s));
        }
    }
    Ok(None)
}

/// Every snapshot of `box_id`, oldest first; records that are not ours are skipped.
pub(crate) async fn list_snapshots(
    store: &ChunkStore,
    box_id: &str,
) -> Result<Vec<MemorySnapshot>, ChunkError> {
    let ids = snapshot_ids(store, box_id).await?;
    let mut snapshots = Vec::with_capacity(ids.len());
    for id in ids {
        match get_snapshot(store, box_id, &id).await {
            Ok(Some(s)) => snapshots.push(s),
            Ok(None) => {}
            // A damaged record is left out rather than hiding every other snapshot.
            Err(ChunkError::MemoryObject { key, why }) => {
                tracing::warn!(%key, why, "skipping a damaged memory snapshot record");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(snapshots)
}

pub(crate) async fn delete_snapshots(
    store: &ChunkStore,
    box_id: &str,
    ids: &[String],
) -> Result<(), ChunkError> {
    crate::check_volume(box_id)?;
    for id in ids.iter().filter(|id| is_snapshot_id(id)) {
        store
            .delete("delete the memory snapshot", &record_key(box_id, id))
            .await?;
    }
    Ok(())
}

/// Every snapshot record of every box: (box, record key).
pub(crate) async fn all_records(store: &ChunkStore) -> Result<Vec<String>, ChunkError> {
    Ok(store
        .list("list the memory snapshots in", BOXES)
        .await?
        .into_iter()
        .map(|m| m.location.to_string())
        .filter(|k| k.ends_with(".json"))
        .collect())
}

pub(crate) async fn read_record(
    store: &ChunkStore,
    key: &str,
) -> Result<Option<MemorySnapshot>, ChunkError> {
    match store
        .get("read the memory snapshot", key, RECORD_MAX_BYTES)
        .await?
    {
        Some(Fetched::Bytes(b)) => Ok(serde_json::from_slice(&b).ok()),
        _ => Ok(None),
    }
}
