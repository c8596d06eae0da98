//! What can go wrong, one variant per cause, each saying what to do next where it can.
//! Sources are chained, not repeated in the message: print the chain once.
//!
//! A damaged index is not an error here: [`crate::MemoryIndex::open`] deletes it and starts
//! empty (it is a cache of the memory). The variants below are what remains: the directory
//! itself, another writer, a bad request, and tantivy failing on an index it could open.

use std::path::PathBuf;

use tantivy::directory::error::{LockError, OpenDirectoryError};
use tantivy::TantivyError;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("cannot create the memory index directory {}; check that its parent exists and is writable", dir.display())]
    CreateDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot open the memory index directory {}", dir.display())]
    OpenDir {
        dir: PathBuf,
        #[source]
        source: OpenDirectoryError,
    },

    /// Another `MemoryIndex`, in this process or another, holds the index's writer lock.
    #[error("the memory index in {} is already open (in this process or another); use that one, or drop it first", dir.display())]
    Busy { dir: PathBuf },

    #[error("cannot lock the memory index in {}", dir.display())]
    Lock {
        dir: PathBuf,
        #[source]
        source: LockError,
    },

    /// The index was damaged and deleting its files failed.
    #[error("cannot delete the damaged memory index in {}; delete the directory by hand, it is rebuilt from the memory", dir.display())]
    Reset {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Creating a new index (after any reset), or starting its writer or reader, failed.
    #[error("cannot open the memory index in {}; check free disk space and permissions", dir.display())]
    Open {
        dir: PathBuf,
        #[source]
        source: TantivyError,
    },

    /// A path the index does not take (see [`crate::MAX_PATH_BYTES`]); nothing was written.
    #[error("{path:?} cannot be indexed: a path is 1 to {max} bytes without NUL; leave it out of the changes", max = crate::MAX_PATH_BYTES)]
    InvalidPath { path: String },

    /// Indexing or committing failed; the batch was rolled back, the index is as before.
    #[error("cannot write to the memory index; the changes were rolled back: retry, or delete the index directory to rebuild it")]
    Write {
        #[source]
        source: TantivyError,
    },

    /// A commit succeeded but the searcher did not pick it up.
    #[error("the memory index was written but cannot be reloaded; reopen it")]
    Reload {
        #[source]
        source: TantivyError,
    },

    #[error(
        "cannot read the memory index; if this persists, delete the index directory to rebuild it"
    )]
    Read {
        #[source]
        source: TantivyError,
    },

    /// The query is empty or only blanks.
    #[error("the search query is empty; give at least one word")]
    EmptyQuery,

    /// `links()` of a path the index does not hold.
    #[error("{path:?} is not in the memory index")]
    NotIndexed { path: String },
}

impl IndexError {
    pub(crate) fn read(source: impl Into<TantivyError>) -> IndexError {
        IndexError::Read {
            source: source.into(),
        }
    }
}
