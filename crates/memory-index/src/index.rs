//! One box's index: opening it, and what it says about itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

use tantivy::query::QueryParser;
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyError};

use crate::columns;
use crate::open::{lock_error, open_dir};
use crate::schema::{self, Fields, Payload, HASH};
use crate::IndexError;

/// The writer's indexing heap. tantivy flushes a segment when it fills; 15 MB is its
/// minimum. One indexing thread: a box's memory is small, and a host runs many indexes.
const WRITER_HEAP_BYTES: usize = 20_000_000;

/// How much more a word in a file's path weighs than one in its body: a query that names
/// the file (`alice`) should find `entities/alice.md` before the files that mention her.
pub(crate) const PATH_BOOST: f32 = 2.0;

/// One box's index, in its own directory.
///
/// `Send + Sync`: searches run while an `apply` writes (the writer is behind a mutex; the
/// reader moves to a commit only once it is complete). It holds tantivy's writer lock and a
/// few threads while open: keep open the indexes in use, not one per box forever.
pub struct MemoryIndex {
    pub(crate) dir: PathBuf,
    pub(crate) index: Index,
    pub(crate) fields: Fields,
    pub(crate) writer: Mutex<IndexWriter>,
    pub(crate) reader: IndexReader,
    pub(crate) parser: QueryParser,
    pub(crate) version: RwLock<Option<String>>,
    was_reset: bool,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryIndex")
            .field("dir", &self.dir)
            .field("version", &self.version())
            .field("was_reset", &self.was_reset)
            .finish_non_exhaustive()
    }
}

impl MemoryIndex {
    /// Opens the index in `dir` (created if absent). An index that cannot be opened
    /// (damaged, or written by an older schema version) is deleted and created empty:
    /// it is a cache, rebuilt from the memory itself; `was_reset()` then says so.
    pub fn open(dir: &Path) -> Result<MemoryIndex, IndexError> {
        let (schema, fields) = schema::build();
        let opened = open_dir(dir, &schema)?;
        let index = opened.index;
        schema::register_tokenizer(&index);
        let open_error = |source| IndexError::Open {
            dir: dir.to_owned(),
            source,
        };

        let mut writer: IndexWriter = index
            .writer_with_num_threads(1, WRITER_HEAP_BYTES)
            .map_err(|err| match err {
                TantivyError::LockFailure(err, _) => lock_error(dir, err),
                source => open_error(source),
            })?;
        if opened.created {
            // A first commit records the schema version: until it exists, the next open
            // would take this index for a foreign one.
            let mut commit = writer.prepare_commit().map_err(open_error)?;
            commit.set_payload(&Payload::new(None).encode());
            commit.commit().map_err(open_error)?;
        }
        let reader: IndexReader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(open_error)?;

        let mut parser = QueryParser::for_index(&index, vec![fields.path_words, fields.body]);
        parser.set_field_boost(fields.path_words, PATH_BOOST);

        Ok(MemoryIndex {
            dir: dir.to_owned(),
            index,
            fields,
            writer: Mutex::new(writer),
            reader,
            parser,
            version: RwLock::new(opened.version),
            was_reset: opened.was_reset,
        })
    }

    /// Whether `open` found the index unusable and started it empty: reindex everything.
    pub fn was_reset(&self) -> bool {
        self.was_reset
    }

    /// The opaque version string the last `apply` recorded (e.g. the snapshot hash the
    /// index reflects), None for a new index. Stored durably with the commit.
    pub fn version(&self) -> Option<String> {
        self.version
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// What the index holds: path -> content hash (as given in `Change::Upsert`).
    pub fn files(&self) -> Result<BTreeMap<String, String>, IndexError> {
        let rows = columns::paths_with(&self.searcher(), HASH).map_err(IndexError::read)?;
        Ok(rows
            .into_iter()
            .map(|(path, hashes)| (path, hashes.into_iter().next().unwrap_or_default()))
            .collect())
    }

    pub(crate) fn searcher(&self) -> Searcher {
        self.reader.searcher()
    }

    /// The writer, for one batch. A batch that panicked midway left its documents pending:
    /// they are dropped before the writer is used again.
    pub(crate) fn lock_writer(&self) -> Result<MutexGuard<'_, IndexWriter>, IndexError> {
        match self.writer.lock() {
            Ok(writer) => Ok(writer),
            Err(poisoned) => {
                let mut writer = poisoned.into_inner();
                writer
                    .rollback()
                    .map_err(|source| IndexError::Write { source })?;
                self.writer.clear_poison();
                Ok(writer)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<MemoryIndex>();
    }
}
