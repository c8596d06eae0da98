//! Opening a box's index directory, and starting over when what is there is not usable.
//!
//! The index is a cache of the box's memory: an index that tantivy cannot open, whose
//! schema differs, whose last commit was not made under [`crate::SCHEMA_VERSION`], or whose
//! `meta.json` is gone while other files remain, is deleted and created empty. The caller
//! learns it from `was_reset()` and reindexes everything.
//!
//! All of that happens under tantivy's writer lock, the same lock an `IndexWriter` holds:
//! a reset deletes files, and must never do so under another writer still using them.

use std::fs;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};

use tantivy::directory::error::LockError;
use tantivy::directory::{MmapDirectory, INDEX_WRITER_LOCK, META_LOCK};
use tantivy::schema::Schema;
use tantivy::{Directory, Index, IndexReader, IndexSettings, ReloadPolicy};

use crate::schema::Payload;
use crate::IndexError;

/// An index directory as found, or as made.
pub(crate) struct Opened {
    pub index: Index,
    /// The caller's version of the last commit.
    pub version: Option<String>,
    /// Created by this open: no commit has recorded the schema version yet.
    pub created: bool,
    /// Created because what was there was not usable.
    pub was_reset: bool,
}

enum Existing {
    Usable(Index, Payload),
    Absent,
    Damaged,
}

/// Opens the index in `dir` (created if absent), or resets it.
pub(crate) fn open_dir(dir: &Path, schema: &Schema) -> Result<Opened, IndexError> {
    fs::create_dir_all(dir).map_err(|source| IndexError::CreateDir {
        dir: dir.to_owned(),
        source,
    })?;
    let directory = MmapDirectory::open(dir).map_err(|source| IndexError::OpenDir {
        dir: dir.to_owned(),
        source,
    })?;
    let lock = directory
        .acquire_lock(&INDEX_WRITER_LOCK)
        .map_err(|err| lock_error(dir, err))?;

    let opened = match existing(dir, &directory, schema) {
        Existing::Usable(index, payload) => Opened {
            index,
            version: payload.version,
            created: false,
            was_reset: false,
        },
        Existing::Absent => Opened {
            index: create(dir, directory, schema)?,
            version: None,
            created: true,
            was_reset: false,
        },
        Existing::Damaged => {
            clear(dir)?;
            Opened {
                index: create(dir, directory, schema)?,
                version: None,
                created: true,
                was_reset: true,
            }
        }
    };
    // The writer the caller starts next takes the lock again.
    drop(lock);
    Ok(opened)
}

pub(crate) fn lock_error(dir: &Path, err: LockError) -> IndexError {
    match err {
        LockError::LockBusy => IndexError::Busy {
            dir: dir.to_owned(),
        },
        source => IndexError::Lock {
            dir: dir.to_owned(),
            source,
        },
    }
}

fn existing(dir: &Path, directory: &MmapDirectory, schema: &Schema) -> Existing {
    if has_truncated_files(dir) {
        return Existing::Damaged;
    }
    // tantivy is not hardened against every damaged file (it panics on some, see
    // `has_truncated_files`): a panic while opening is one more sign of damage, not a
    // reason to take the caller down. Nothing opened here outlives the closure.
    std::panic::catch_unwind(AssertUnwindSafe(|| open_existing(dir, directory, schema)))
        .unwrap_or(Existing::Damaged)
}

fn open_existing(dir: &Path, directory: &MmapDirectory, schema: &Schema) -> Existing {
    match Index::exists(directory) {
        Ok(true) => {}
        Ok(false) if has_leftovers(dir) => return Existing::Damaged,
        Ok(false) => return Existing::Absent,
        Err(_) => return Existing::Damaged,
    }
    let Ok(index) = Index::open(directory.clone()) else {
        return Existing::Damaged;
    };
    if index.schema() != *schema {
        return Existing::Damaged;
    }
    let Some(payload) = index
        .load_metas()
        .ok()
        .and_then(|metas| Payload::decode(metas.payload.as_deref()))
    else {
        return Existing::Damaged;
    };
    // Opening a reader opens every segment and reads its footers: truncated or foreign
    // segment files show now, not at the first search.
    let reader: tantivy::Result<IndexReader> = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into();
    match reader {
        Ok(_) => Existing::Usable(index, payload),
        Err(_) => Existing::Damaged,
    }
}

/// Every file tantivy writes besides its `.json` metas and its locks ends in a footer of at
/// least this many bytes; tantivy 0.27 panics (an overflow) on a shorter one.
const MIN_SEGMENT_FILE_BYTES: u64 = 8;

/// A segment file too short to hold its footer: a truncated index.
fn has_truncated_files(dir: &Path) -> bool {
    let Ok(files) = files_to_clear(dir) else {
        return false;
    };
    files.iter().any(|path| {
        let is_meta = path.extension().is_some_and(|ext| ext == "json");
        let is_short = fs::symlink_metadata(path)
            .is_ok_and(|meta| meta.is_file() && meta.len() < MIN_SEGMENT_FILE_BYTES);
        !is_meta && is_short
    })
}

/// A new, empty index in `directory`.
fn create(dir: &Path, directory: MmapDirectory, schema: &Schema) -> Result<Index, IndexError> {
    Index::create(directory, schema.clone(), IndexSettings::default()).map_err(|source| {
        IndexError::Open {
            dir: dir.to_owned(),
            source,
        }
    })
}

/// tantivy's lock files: held (the writer lock, by `open_dir`) or harmless, never deleted.
fn is_lock_file(name: &std::ffi::OsStr) -> bool {
    name == INDEX_WRITER_LOCK.filepath.as_os_str() || name == META_LOCK.filepath.as_os_str()
}

/// Files other than locks in a directory without `meta.json`: an index that lost its meta
/// (or a directory that never held one). An unreadable directory counts as damaged, and
/// `clear` then reports why.
fn has_leftovers(dir: &Path) -> bool {
    match files_to_clear(dir) {
        Ok(files) => !files.is_empty(),
        Err(_) => true,
    }
}

/// Deletes the index's files. Only plain files and symlinks directly in `dir`, which is all
/// tantivy writes: a subdirectory is not the index's, and is left alone.
fn clear(dir: &Path) -> Result<(), IndexError> {
    let reset_error = |source| IndexError::Reset {
        dir: dir.to_owned(),
        source,
    };
    for path in files_to_clear(dir).map_err(reset_error)? {
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(reset_error(err)),
        }
    }
    Ok(())
}

fn files_to_clear(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() || is_lock_file(&entry.file_name()) {
            continue;
        }
        files.push(entry.path());
    }
    Ok(files)
}
