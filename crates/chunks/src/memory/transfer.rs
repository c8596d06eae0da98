//! A box's memory history carried out of one store and into another (a box's backup):
//! every snapshot record and every object they name.
//!
//! Out ([`MemoryHistory::export`]): under an upload marker, so no GC sweeps an object
//! while the backup reads it. In: first [`check_import`], from files and before anything
//! is stored: every object's bytes match its name, every tree parses, and every object a
//! record names is among them. Nothing is ever taken from the store on the archive's
//! word, so an archive cannot name another box's file by its hash and be given it. Then
//! [`MemoryHistory::import`] stores what the store lacks and writes the records last.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use berth_protocol::memory_history::MemorySnapshot;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::objects::{self, is_snapshot_id, TREE_MAX_BYTES};
use super::tree::{self, TreeObject};
use super::{MemoryHistory, MAX_SNAPSHOT_BYTES};
use crate::keys::is_hash;
use crate::markers::{self, Marker, MarkerKind};
use crate::{ChunkError, ChunkStore};

/// Where [`check_import`] looks: `<dir>/trees/<hash>` (a tree's JSON) and
/// `<dir>/blobs/<hash>` (a file's bytes), as an export writes them.
pub const TREES_DIR: &str = "trees";
pub const BLOBS_DIR: &str = "blobs";
/// The deepest a tree is followed (as a snapshot's walk).
const MAX_DEPTH: usize = 64;

/// A box's whole history, read out of the store: its records, and every object they name.
pub struct HistoryExport {
    store: ChunkStore,
    marker: Marker,
    /// Oldest first.
    pub records: Vec<MemorySnapshot>,
    /// Every tree, as its JSON.
    pub trees: BTreeMap<String, Bytes>,
    /// Every blob, with its size.
    pub blobs: BTreeMap<String, u64>,
}

impl MemoryHistory {
    /// The records of `box_id` and the objects they name. Hold it only while the backup
    /// runs, then [`HistoryExport::finish`]: until then no memory GC sweeps.
    pub async fn export(&self, box_id: &str) -> Result<HistoryExport, ChunkError> {
        let store = &self.store;
        let mut marker = Marker::write(store, MarkerKind::Upload).await?;
        if !markers::wait_while_gc_runs(store, &mut marker).await? {
            return Err(ChunkError::MemoryInput(
                "a GC took the backup's marker for a stale one; back up again".into(),
            ));
        }
        let records = objects::list_snapshots(store, box_id).await?;
        let mut trees = BTreeMap::new();
        let mut blobs = BTreeMap::new();
        let mut todo: Vec<String> = records.iter().map(|r| r.root.clone()).collect();
        while let Some(hash) = todo.pop() {
            if trees.contains_key(&hash) {
                continue;
            }
            let json = objects::get_tree(store, &hash).await?;
            let object = tree::parse_tree(&objects::tree_key(&hash), &json)?;
            for entry in object.entries {
                if entry.dir {
                    todo.push(entry.hash);
                } else {
                    blobs.insert(entry.hash, entry.size);
                }
            }
            trees.insert(hash, json);
        }
        Ok(HistoryExport {
            store: store.clone(),
            marker,
            records,
            trees,
            blobs,
        })
    }
}

impl HistoryExport {
    /// The bytes of the blob `hash`, checked.
    pub async fn blob(&mut self, hash: &str, size: u64) -> Result<Bytes, ChunkError> {
        self.keep_alive().await?;
        objects::get_blob(&self.store, hash, size).await
    }

    /// Ends the export: an error if a GC took its marker for stale meanwhile (it may have
    /// swept what the backup then read as missing).
    pub async fn finish(mut self) -> Result<(), ChunkError> {
        self.keep_alive().await?;
        self.marker.remove().await
    }

    async fn keep_alive(&mut self) -> Result<(), ChunkError> {
        if self.marker.keep_alive().await? {
            return Ok(());
        }
        Err(ChunkError::MemoryInput(
            "the backup stalled past the stale limit and lost its marker; back up again".into(),
        ))
    }
}

/// A history checked whole from files, ready for [`MemoryHistory::import`].
#[derive(Debug)]
pub struct HistoryImport {
    dir: PathBuf,
    records: Vec<MemorySnapshot>,
    trees: BTreeSet<String>,
    blobs: BTreeSet<String>,
}

impl HistoryImport {
    pub fn records(&self) -> &[MemorySnapshot] {
        &self.records
    }
}

fn refused(why: impl Into<String>) -> ChunkError {
    ChunkError::HistoryImport(why.into())
}

/// Checks the history `records` with its objects in `dir` (see [`TREES_DIR`]): every
/// object's bytes hash to its name, every tree is one, every object a record names is
/// there (a file as long as its entry says), and nothing else is. Reads every file;
/// blocking.
pub fn check_import(dir: &Path, records: Vec<MemorySnapshot>) -> Result<HistoryImport, ChunkError> {
    let mut ids = BTreeSet::new();
    for record in &records {
        if !is_snapshot_id(&record.id) || !is_hash(&record.root) {
            return Err(refused(format!("{:?} is not a snapshot record", record.id)));
        }
        if !ids.insert(record.id.clone()) {
            return Err(refused(format!(
                "the snapshot {} is there twice",
                record.id
            )));
        }
    }
    let trees = read_trees(&dir.join(TREES_DIR))?;
    let blobs = blob_sizes(&dir.join(BLOBS_DIR))?;
    // Everything the records name, from the files alone.
    let (mut named_trees, mut named_blobs) = (BTreeSet::new(), BTreeSet::new());
    let mut todo: Vec<(String, usize)> = records.iter().map(|r| (r.root.clone(), 0)).collect();
    while let Some((hash, depth)) = todo.pop() {
        if depth > MAX_DEPTH {
            return Err(refused(format!("the tree {hash} is nested too deep")));
        }
        if !named_trees.insert(hash.clone()) {
            continue;
        }
        let tree = trees
            .get(&hash)
            .ok_or_else(|| refused(format!("the tree {hash} is named but missing")))?;
        for entry in &tree.entries {
            if entry.dir {
                todo.push((entry.hash.clone(), depth + 1));
                continue;
            }
            match blobs.get(&entry.hash) {
                Some(&size) if size == entry.size => {
                    named_blobs.insert(entry.hash.clone());
                }
                Some(_) => {
                    return Err(refused(format!(
                        "the file {} is not as long as its tree says",
                        entry.hash
                    )))
                }
                None => {
                    return Err(refused(format!(
                        "the file {} is named but missing",
                        entry.hash
                    )))
                }
            }
        }
    }
    if let Some(extra) = trees.keys().find(|h| !named_trees.contains(*h)) {
        return Err(refused(format!("the tree {extra} is in no snapshot")));
    }
    if let Some(extra) = blobs.keys().find(|h| !named_blobs.contains(*h)) {
        return Err(refused(format!("the file {extra} is in no snapshot")));
    }
    Ok(HistoryImport {
        dir: dir.to_owned(),
        records,
        trees: named_trees,
        blobs: named_blobs,
    })
}

/// The objects' names in `dir` (absent: none), each checked to be a hash.
fn object_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, ChunkError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io("list", dir, source)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| io("list", dir, source))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !is_hash(&name) {
            return Err(refused(format!("{name:?} is not an object's name")));
        }
        files.push((name, entry.path()));
    }
    Ok(files)
}

fn read_trees(dir: &Path) -> Result<BTreeMap<String, TreeObject>, ChunkError> {
    let mut trees = BTreeMap::new();
    for (hash, path) in object_files(dir)? {
        let json = read_bounded(&path, TREE_MAX_BYTES)?;
        if objects::sha256_hex(&json) != hash {
            return Err(refused(format!("the tree {hash} does not match its name")));
        }
        let tree = tree::parse_tree(&hash, &json)
            .map_err(|_| refused(format!("the tree {hash} is not a tree")))?;
        trees.insert(hash, tree);
    }
    Ok(trees)
}

fn blob_sizes(dir: &Path) -> Result<BTreeMap<String, u64>, ChunkError> {
    let mut sizes = BTreeMap::new();
    for (hash, path) in object_files(dir)? {
        let mut file = std::fs::File::open(&path).map_err(|source| io("open", &path, source))?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut size = 0u64;
        loop {
            let n = file
                .read(&mut buf)
                .map_err(|source| io("read", &path, source))?;
            if n == 0 {
                break;
            }
            size += n as u64;
            if size > MAX_SNAPSHOT_BYTES {
                return Err(refused(format!(
                    "the file {hash} is larger than memory may be"
                )));
            }
            hasher.update(&buf[..n]);
        }
        if hex(&hasher.finalize()) != hash {
            return Err(refused(format!("the file {hash} does not match its name")));
        }
        sizes.insert(hash, size);
    }
    Ok(sizes)
}

fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, ChunkError> {
    let file = std::fs::File::open(path).map_err(|source| io("open", path, source))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| io("read", path, source))?;
    if bytes.len() as u64 > max {
        return Err(refused(format!(
            "{} is larger than a tree can be",
            path.display()
        )));
    }
    Ok(bytes)
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn io(action: &'static str, path: &Path, source: std::io::Error) -> ChunkError {
    ChunkError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

impl MemoryHistory {
    /// Stores a checked history as `box_id`'s: the objects the store lacks, then the
    /// records. `box_id` should have no snapshots yet.
    pub async fn import(&self, box_id: &str, import: &HistoryImport) -> Result<(), ChunkError> {
        crate::check_volume(box_id)?;
        let store = &self.store;
        let mut marker = Marker::write(store, MarkerKind::Upload).await?;
        let lost = || {
            ChunkError::MemoryInput(
                "the restore stalled past the stale limit and lost its marker; restore again"
                    .into(),
            )
        };
        if !markers::wait_while_gc_runs(store, &mut marker).await? {
            return Err(lost());
        }
        let objects = import
            .trees
            .iter()
            .map(|h| (h, TREES_DIR, objects::tree_key(h)))
            .chain(
                import
                    .blobs
                    .iter()
                    .map(|h| (h, BLOBS_DIR, objects::blob_key(h))),
            );
        for (hash, dir, key) in objects {
            if !marker.keep_alive().await? {
                return Err(lost());
            }
            if store.exists("look for the memory object", &key).await? {
                continue;
            }
            let path = import.dir.join(dir).join(hash);
            let data = std::fs::read(&path).map_err(|source| io("read", &path, source))?;
            objects::put_compressed(store, "store the memory object", &key, &data).await?;
        }
        for record in &import.records {
            objects::put_snapshot(store, box_id, record).await?;
        }
        if !marker.still_there().await? {
            let ids: Vec<String> = import.records.iter().map(|r| r.id.clone()).collect();
            objects::delete_snapshots(store, box_id, &ids).await?;
            return Err(lost());
        }
        marker.remove().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryInput, TakeSnapshot};
    use crate::StoreConfig;
    use berth_protocol::memory_history::SnapshotReason;

    fn store(dir: &Path) -> ChunkStore {
        ChunkStore::open(&StoreConfig {
            url: dir.to_string_lossy().into_owned(),
            credentials_file: None,
        })
        .unwrap()
    }

    fn file(path: &str, text: &str) -> MemoryInput {
        MemoryInput::File {
            path: path.into(),
            content: Bytes::from(text.to_owned()),
        }
    }

    /// Two snapshots of `bx_a` in a new store, exported to files as a backup holds them.
    async fn exported(root: &Path) -> (ChunkStore, Vec<MemorySnapshot>, PathBuf) {
        let from = store(&root.join("from"));
        let history = from.memory();
        for text in ["one", "two"] {
            let take = TakeSnapshot {
                box_id: "bx_a",
                reason: SnapshotReason::Request,
                inputs: vec![file("README.md", "hello"), file("entities/bob.md", text)],
            };
            history.take(take).await.unwrap();
        }
        let mut export = history.export("bx_a").await.unwrap();
        let files = root.join("files");
        std::fs::create_dir_all(files.join(TREES_DIR)).unwrap();
        std::fs::create_dir_all(files.join(BLOBS_DIR)).unwrap();
        for (hash, json) in &export.trees {
            std::fs::write(files.join(TREES_DIR).join(hash), json).unwrap();
        }
        for (hash, size) in export.blobs.clone() {
            let bytes = export.blob(&hash, size).await.unwrap();
            std::fs::write(files.join(BLOBS_DIR).join(&hash), bytes).unwrap();
        }
        let records = export.records.clone();
        export.finish().await.unwrap();
        (from, records, files)
    }

    #[tokio::test]
    async fn an_exported_history_imports_whole_under_another_box() {
        let root = tempfile::tempdir().unwrap();
        let (from, records, files) = exported(root.path()).await;
        assert_eq!(records.len(), 2);
        let import = check_import(&files, records.clone()).unwrap();
        let to = store(&root.path().join("to")).memory();
        to.import("bx_b", &import).await.unwrap();
        assert_eq!(to.list("bx_b").await.unwrap(), records);
        for record in &records {
            let (a, b) = (
                from.memory().files(record).await.unwrap(),
                to.files(record).await.unwrap(),
            );
            assert_eq!(a, b);
            let bob = &b["entities/bob.md"];
            assert!(!to.read(bob).await.unwrap().is_empty());
        }
    }

    #[tokio::test]
    async fn a_history_missing_an_object_or_with_a_changed_one_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let (_, records, files) = exported(root.path()).await;
        let blob = std::fs::read_dir(files.join(BLOBS_DIR))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path();
        let bytes = std::fs::read(&blob).unwrap();
        std::fs::write(&blob, b"changed").unwrap();
        let err = check_import(&files, records.clone()).unwrap_err();
        assert!(err.to_string().contains("does not match its name"), "{err}");
        std::fs::remove_file(&blob).unwrap();
        let err = check_import(&files, records.clone()).unwrap_err();
        assert!(err.to_string().contains("named but missing"), "{err}");
        std::fs::write(&blob, bytes).unwrap();
        check_import(&files, records.clone()).unwrap();
        // An object no snapshot names, whose name a store might already know.
        let stray = objects::sha256_hex(b"a stray");
        std::fs::write(files.join(BLOBS_DIR).join(&stray), b"a stray").unwrap();
        let err = check_import(&files, records).unwrap_err();
        assert!(err.to_string().contains("in no snapshot"), "{err}");
    }

    #[tokio::test]
    async fn a_record_naming_an_object_only_the_store_has_is_refused() {
        // The store has the object (another box's), the archive does not: no import.
        let root = tempfile::tempdir().unwrap();
        let (_, records, files) = exported(root.path()).await;
        std::fs::remove_dir_all(files.join(TREES_DIR)).unwrap();
        let err = check_import(&files, records).unwrap_err();
        assert!(err.to_string().contains("named but missing"), "{err}");
    }
}
