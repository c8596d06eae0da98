//! Taking a snapshot: the trees and blobs of `/memory` as given are hashed in memory, then
//! stored top down, skipping every tree already in the store (it is whole: a tree is
//! written after everything it names) and every blob its previous snapshot's tree at the
//! same directory already names; the record last.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};

use berth_protocol::memory_history::{MemorySnapshot, SnapshotReason};
use bytes::Bytes;

use super::objects::{self, sha256_hex};
use super::tree::{self, TreeEntry, TreeObject};
use super::{MemoryHistory, MemoryInput};
use crate::markers::{self, Marker, MarkerKind};
use crate::{ChunkError, ChunkStore};

/// Blobs stored at once.
const BLOB_PUTS: usize = 8;

/// A snapshot to take: of `box_id`'s memory as `inputs` hold it.
pub struct TakeSnapshot<'a> {
    pub box_id: &'a str,
    pub reason: SnapshotReason,
    pub inputs: Vec<MemoryInput>,
}

enum Node {
    File(Bytes),
    Dir(BTreeMap<String, Node>),
}

/// The snapshot's objects, hashed, before anything is stored.
#[derive(Default)]
struct Hashed {
    trees: HashMap<String, (Bytes, TreeObject)>,
    blobs: HashMap<String, Bytes>,
    files: u64,
    bytes: u64,
}

impl MemoryHistory {
    /// Stores a snapshot of what `take` holds and returns its record.
    pub async fn take(&self, take: TakeSnapshot<'_>) -> Result<MemorySnapshot, ChunkError> {
        let box_id = take.box_id;
        let (reason, hashed, root_hash) = hash_inputs(take)?;
        let previous = objects::latest_snapshot(&self.store, box_id).await?;
        self.store_hashed(box_id, reason, hashed, root_hash, previous)
            .await
    }

    /// [`Self::take`], unless the box's newest snapshot holds the same tree already
    /// (then None: a memory that did not change since is not recorded again).
    pub async fn take_if_changed(
        &self,
        take: TakeSnapshot<'_>,
    ) -> Result<Option<MemorySnapshot>, ChunkError> {
        let box_id = take.box_id;
        let (reason, hashed, root_hash) = hash_inputs(take)?;
        let previous = objects::latest_snapshot(&self.store, box_id).await?;
        if previous.as_ref().is_some_and(|p| p.root == root_hash) {
            return Ok(None);
        }
        self.store_hashed(box_id, reason, hashed, root_hash, previous)
            .await
            .map(Some)
    }

    async fn store_hashed(
        &self,
        box_id: &str,
        reason: SnapshotReason,
        hashed: Hashed,
        root_hash: String,
        previous: Option<MemorySnapshot>,
    ) -> Result<MemorySnapshot, ChunkError> {
        let store = &self.store;
        let mut marker = Marker::write(store, MarkerKind::Upload).await?;
        if !markers::wait_while_gc_runs(store, &mut marker).await? {
            return Err(ChunkError::MemoryInput(
                "a GC took this snapshot's marker for a stale one; take it again".into(),
            ));
        }
        let previous_root = previous.as_ref().map(|p| p.root.clone());
        let stored_bytes = ensure_tree(store, &hashed, &root_hash, previous_root).await?;
        let record = MemorySnapshot {
            id: free_id(self, box_id).await?,
            taken_at: String::new(),
            reason,
            files: hashed.files,
            bytes: hashed.bytes,
            stored_bytes,
            root: root_hash,
        };
        let record = MemorySnapshot {
            taken_at: rfc3339_ms(&record.id),
            ..record
        };
        objects::put_snapshot(store, box_id, &record).await?;
        if !marker.still_there().await? {
            // A GC took the marker for a crashed snapshot's and may have swept objects
            // this one names: it cannot be trusted.
            objects::delete_snapshots(store, box_id, std::slice::from_ref(&record.id)).await?;
            return Err(ChunkError::MemoryInput(
                "a GC ran while this snapshot stalled; take it again".into(),
            ));
        }
        marker.remove().await?;
        Ok(record)
    }
}

/// The inputs' trees and blobs, hashed; the root tree's hash.
fn hash_inputs(take: TakeSnapshot<'_>) -> Result<(SnapshotReason, Hashed, String), ChunkError> {
    crate::check_volume(take.box_id)?;
    let mut root = BTreeMap::new();
    for input in take.inputs {
        insert(&mut root, input)?;
    }
    let mut hashed = Hashed::default();
    let root_hash = hash_dir(&root, &mut hashed);
    Ok((take.reason, hashed, root_hash))
}

fn insert(root: &mut BTreeMap<String, Node>, input: MemoryInput) -> Result<(), ChunkError> {
    let path = input.path().to_owned();
    let mut names: Vec<&str> = path.split('/').collect();
    let last = names.pop().expect("a path has a name");
    let mut dir = root;
    for name in names {
        let node = dir
            .entry(name.to_owned())
            .or_insert_with(|| Node::Dir(BTreeMap::new()));
        dir = match node {
            Node::Dir(children) => children,
            Node::File(_) => {
                return Err(ChunkError::MemoryInput(format!(
                    "{path}: a file stands where its directory should be"
                )))
            }
        };
    }
    match input {
        MemoryInput::Dir(_) => {
            dir.entry(last.to_owned())
                .or_insert_with(|| Node::Dir(BTreeMap::new()));
        }
        MemoryInput::File { content, .. } => {
            dir.insert(last.to_owned(), Node::File(content));
        }
    }
    Ok(())
}

/// Hashes `dir` and everything below it into `hashed`; the directory's tree hash.
fn hash_dir(dir: &BTreeMap<String, Node>, hashed: &mut Hashed) -> String {
    let mut entries = Vec::with_capacity(dir.len());
    for (name, node) in dir {
        let entry = match node {
            Node::File(content) => {
                let hash = sha256_hex(content);
                hashed.files += 1;
                hashed.bytes += content.len() as u64;
                hashed.blobs.insert(hash.clone(), content.clone());
                TreeEntry {
                    name: name.clone(),
                    dir: false,
                    size: content.len() as u64,
                    hash,
                }
            }
            Node::Dir(children) => TreeEntry {
                name: name.clone(),
                dir: true,
                size: 0,
                hash: hash_dir(children, hashed),
            },
        };
        entries.push(entry);
    }
    let tree = TreeObject { entries };
    let json = Bytes::from(serde_json::to_vec(&tree).expect("a tree serializes"));
    let hash = sha256_hex(&json);
    hashed.trees.insert(hash.clone(), (json, tree));
    hash
}

/// Stores the tree `hash` unless the store has it, and below it what the store lacks;
/// `previous` is the tree at the same directory in the previous snapshot, whose blobs
/// need no look. The compressed bytes written.
async fn ensure_tree(
    store: &ChunkStore,
    hashed: &Hashed,
    root: &str,
    previous: Option<String>,
) -> Result<u64, ChunkError> {
    let mut written = 0;
    // Depth first, children before their tree: a stack of (tree, previous, children done).
    let mut stack = vec![(root.to_owned(), previous, false)];
    let mut present: HashSet<String> = HashSet::new();
    while let Some((hash, previous, children_done)) = stack.pop() {
        let (json, tree) = &hashed.trees[&hash];
        if children_done {
            written += objects::put_compressed(
                store,
                "store the memory tree",
                &objects::tree_key(&hash),
                json,
            )
            .await?;
            present.insert(hash);
            continue;
        }
        if present.contains(&hash)
            || store
                .exists("look for the memory tree", &objects::tree_key(&hash))
                .await?
        {
            present.insert(hash);
            continue;
        }
        let before = match &previous {
            Some(p) => tree::read_tree(store, p).await.ok(),
            None => None,
        };
        let known: HashSet<&str> = before
            .iter()
            .flat_map(|t| t.entries.iter().filter(|e| !e.dir).map(|e| e.hash.as_str()))
            .collect();
        let previous_dir = |name: &str| {
            before.as_ref().and_then(|t| {
                t.entries
                    .iter()
                    .find(|e| e.dir && e.name == name)
                    .map(|e| e.hash.clone())
            })
        };
        let blobs: Vec<&str> = tree
            .entries
            .iter()
            .filter(|e| !e.dir && !known.contains(e.hash.as_str()))
            .map(|e| e.hash.as_str())
            .collect::<HashSet<_>>()
            .into_iter()
            .collect();
        // A few at a time (a plain loop of joins: stream combinators over borrowing
        // closures make the future not `Send` for every lifetime, as axum needs).
        for batch in blobs.chunks(BLOB_PUTS) {
            let puts = batch
                .iter()
                .map(|h| ensure_blob(store, h, &hashed.blobs[*h]));
            for n in futures_util::future::try_join_all(puts).await? {
                written += n;
            }
        }
        stack.push((hash.clone(), None, true));
        for e in tree.entries.iter().filter(|e| e.dir) {
            stack.push((e.hash.clone(), previous_dir(&e.name), false));
        }
    }
    Ok(written)
}

async fn ensure_blob(store: &ChunkStore, hash: &str, content: &[u8]) -> Result<u64, ChunkError> {
    let key = objects::blob_key(hash);
    if store.exists("look for the memory file", &key).await? {
        return Ok(0);
    }
    objects::put_compressed(store, "store the memory file", &key, content).await
}

/// An id of now that `box_id` has no snapshot of yet.
async fn free_id(history: &MemoryHistory, box_id: &str) -> Result<String, ChunkError> {
    let mut ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    loop {
        let id = objects::snapshot_id(ms);
        if history.get(box_id, &id).await?.is_none() {
            return Ok(id);
        }
        ms += 1;
    }
}

/// The time of a snapshot id, RFC 3339 with exactly three digits of milliseconds (so the
/// strings sort as the times do).
fn rfc3339_ms(id: &str) -> String {
    let ms: i64 = id[3..].parse().unwrap_or(0);
    let Ok(format) = time::format_description::parse_borrowed::<2>(
        "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z",
    ) else {
        return String::new();
    };
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_have_three_digits_of_milliseconds() {
        assert_eq!(
            super::rfc3339_ms("ms_001796435824100"),
            "2026-12-05T01:57:04.100Z"
        );
        assert_eq!(
            super::rfc3339_ms("ms_001796435824000"),
            "2026-12-05T01:57:04.000Z"
        );
    }
}
