//! Finding things in a box's memory: a full-text index and the `[[link]]` graph over the
//! files below its `/memory`, kept in one directory per box on the host.
//!
//! The index is a cache. The caller feeds it changes ([`MemoryIndex::apply`], one commit
//! per batch, with a version string such as the snapshot hash it reflects), compares
//! [`MemoryIndex::files`] with the memory to find what changed, and reindexes everything
//! when [`MemoryIndex::was_reset`] says a damaged or outdated index was started over.
//!
//! - search: BM25 over bodies and paths, OR of the words, plain-text snippets with
//!   highlighted byte ranges (`search.rs`);
//! - links: `[[text]]` and `[[text|alias]]`, stored as written and resolved when asked, so
//!   a link to a file created later leads to it from then on (`links.rs`, `graph.rs`);
//! - text only: a file that is not UTF-8 (or has a NUL near its start) is indexed by its
//!   path; at most [`MAX_INDEXED_BYTES`] of a file are indexed (`text.rs`).
//!
//! The API is synchronous and blocking (tantivy does file I/O): call it from
//! `spawn_blocking`. The wire types are `berth_protocol::memory_search`'s.

mod apply;
mod columns;
mod error;
mod graph;
mod index;
mod links;
mod open;
mod schema;
mod search;
mod text;

pub use apply::{Change, MAX_PATH_BYTES};
pub use error::IndexError;
pub use index::MemoryIndex;
pub use links::{parse_links, resolve_link, MAX_LINK_BYTES};
pub use schema::SCHEMA_VERSION;
pub use search::SNIPPET_MAX_BYTES;
pub use text::MAX_INDEXED_BYTES;
