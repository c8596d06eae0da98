//! A snapshot's directories as stored: each a tree object (its entries, sorted by name, in
//! JSON) named by the hash of that JSON; and a stored tree walked back into paths.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::objects;
use super::MAX_SNAPSHOT_FILES;
use crate::keys::is_hash;
use crate::{ChunkError, ChunkStore};

/// The deepest a stored tree is walked (a box's own `/memory` walk stops at 32).
const MAX_DEPTH: usize = 64;

/// One entry of a tree object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TreeEntry {
    pub name: String,
    pub dir: bool,
    /// A file's bytes; 0 for a directory.
    pub size: u64,
    /// The file's blob, or the directory's tree.
    pub hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TreeObject {
    pub entries: Vec<TreeEntry>,
}

/// What a snapshot holds at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub is_dir: bool,
    pub size: u64,
    /// The blob (a file) or tree (a directory) hash.
    pub hash: String,
}

/// Everything in a snapshot by path (parents sort before their children).
pub type SnapshotFiles = BTreeMap<String, SnapshotFile>;

pub(crate) async fn read_tree(store: &ChunkStore, hash: &str) -> Result<TreeObject, ChunkError> {
    let bytes = objects::get_tree(store, hash).await?;
    parse_tree(&objects::tree_key(hash), &bytes)
}

/// A tree object's JSON, parsed, each entry a plain name; `key` names it in errors.
pub(crate) fn parse_tree(key: &str, json: &[u8]) -> Result<TreeObject, ChunkError> {
    let tree: TreeObject = serde_json::from_slice(json).map_err(|_| ChunkError::MemoryObject {
        key: key.to_owned(),
        why: "not a tree's JSON",
    })?;
    let plain = |e: &TreeEntry| {
        is_hash(&e.hash)
            && !e.name.is_empty()
            && e.name != "."
            && e.name != ".."
            && !e.name.contains(['/', '\0'])
    };
    if !tree.entries.iter().all(plain) {
        return Err(ChunkError::MemoryObject {
            key: key.to_owned(),
            why: "it names an entry that is not a plain name",
        });
    }
    Ok(tree)
}

/// Every path below the tree `root`.
pub(crate) async fn walk(store: &ChunkStore, root: &str) -> Result<SnapshotFiles, ChunkError> {
    let mut files = SnapshotFiles::new();
    let mut todo = vec![(String::new(), root.to_owned(), 0usize)];
    while let Some((dir, hash, depth)) = todo.pop() {
        if depth > MAX_DEPTH {
            return Err(ChunkError::MemoryObject {
                key: objects::tree_key(&hash),
                why: "it is nested deeper than a memory tree can be",
            });
        }
        for entry in read_tree(store, &hash).await?.entries {
            let path = if dir.is_empty() {
                entry.name.clone()
            } else {
                format!("{dir}/{}", entry.name)
            };
            if entry.dir {
                todo.push((path.clone(), entry.hash.clone(), depth + 1));
            }
            files.insert(
                path,
                SnapshotFile {
                    is_dir: entry.dir,
                    size: entry.size,
                    hash: entry.hash,
                },
            );
            if files.len() > MAX_SNAPSHOT_FILES {
                return Err(ChunkError::MemoryObject {
                    key: objects::tree_key(root),
                    why: "it holds more entries than a snapshot can",
                });
            }
        }
    }
    Ok(files)
}
