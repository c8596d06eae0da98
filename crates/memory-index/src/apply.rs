//! Writing: a batch of changes to files becomes one tantivy commit, which records the
//! caller's version with it. A batch is whole or absent: on any failure it is rolled back.

use std::sync::PoisonError;

use bytes::Bytes;
use tantivy::{IndexWriter, TantivyDocument, Term};

use crate::links::{normalize, parse_links};
use crate::schema::{Fields, Payload};
use crate::text::indexable_text;
use crate::{IndexError, MemoryIndex};

/// The longest path the index takes, in bytes (Linux's `PATH_MAX`).
pub const MAX_PATH_BYTES: usize = 4096;

/// One change to the files of a box's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// The file at `path` (below `/memory`) now has `content`; `hash` is the caller's hash of
    /// it, given back by `files()`. Replaces any document of that path.
    Upsert {
        path: String,
        hash: String,
        content: Bytes,
    },
    /// The file at `path` is gone. Removing a path the index does not hold is no change.
    Remove { path: String },
}

impl Change {
    fn path(&self) -> &str {
        match self {
            Change::Upsert { path, .. } | Change::Remove { path } => path,
        }
    }
}

impl MemoryIndex {
    /// Applies changes in ONE commit and records `version`. Upsert replaces a path's
    /// document; of several changes to one path, the last wins. Every path is checked
    /// before anything is written.
    pub fn apply(&self, changes: Vec<Change>, version: Option<String>) -> Result<(), IndexError> {
        if let Some(change) = changes
            .iter()
            .find(|change| !is_indexable_path(change.path()))
        {
            return Err(IndexError::InvalidPath {
                path: change.path().to_owned(),
            });
        }
        let mut writer = self.lock_writer()?;
        if let Err(source) = write_batch(&mut writer, self.fields, changes, &version) {
            // Pending documents would otherwise go out with the next batch's commit.
            let _ = writer.rollback();
            return Err(IndexError::Write { source });
        }
        *self.version.write().unwrap_or_else(PoisonError::into_inner) = version;
        drop(writer);
        // Manual reload: a search right after `apply` returns sees this commit.
        self.reader
            .reload()
            .map_err(|source| IndexError::Reload { source })
    }
}

fn is_indexable_path(path: &str) -> bool {
    !path.is_empty() && path.len() <= MAX_PATH_BYTES && !path.contains('\0')
}

fn write_batch(
    writer: &mut IndexWriter,
    fields: Fields,
    changes: Vec<Change>,
    version: &Option<String>,
) -> tantivy::Result<()> {
    for change in changes {
        match change {
            Change::Upsert {
                path,
                hash,
                content,
            } => {
                // A delete applies to documents added before it: this removes the old
                // version of the file, never the one added next.
                writer.delete_term(Term::from_field_text(fields.path, &path));
                writer.add_document(document(fields, &path, &hash, &content))?;
            }
            Change::Remove { path } => {
                writer.delete_term(Term::from_field_text(fields.path, &path));
            }
        }
    }
    let mut commit = writer.prepare_commit()?;
    commit.set_payload(&Payload::new(version.clone()).encode());
    commit.commit()?;
    Ok(())
}

fn document(fields: Fields, path: &str, hash: &str, content: &[u8]) -> TantivyDocument {
    let mut doc = TantivyDocument::default();
    doc.add_text(fields.path, path);
    doc.add_text(fields.path_words, path);
    doc.add_text(fields.hash, hash);
    if let Some(body) = indexable_text(content) {
        doc.add_text(fields.body, body);
        for text in parse_links(body) {
            doc.add_text(fields.link_keys, normalize(&text));
            doc.add_text(fields.links, text);
        }
    }
    doc
}
