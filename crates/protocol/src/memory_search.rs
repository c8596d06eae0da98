//! Finding things in a box's memory: full-text search with ranked snippets
//! (`GET …/memory/search?q=`), `[[links]]` and backlinks (`GET …/memory/links?path=`) and
//! the whole link graph (`GET …/memory/graph`).

use serde::{Deserialize, Serialize};

/// The most hits one search answers.
pub const MAX_SEARCH_LIMIT: usize = 100;

/// One file that matched.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryHit {
    /// Below `/memory` (`entities/alice.md`).
    pub path: String,
    /// Higher is better (BM25); comparable within one answer only.
    pub score: f32,
    /// A few lines of the file around the best match, as plain text.
    pub snippet: String,
    /// Byte ranges of `snippet` that matched the query, `[start, end)`.
    pub highlights: Vec<[usize; 2]>,
}

/// `GET …/memory/search?q=`: best first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemorySearchResults {
    pub query: String,
    pub hits: Vec<MemoryHit>,
    /// Files the index holds.
    pub indexed_files: u64,
}

/// A `[[link]]` as written in a file, and where it leads.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryLink {
    /// What was between the brackets, before any `|` (`alice`, `timeline/2026-12`).
    pub text: String,
    /// The file it resolves to below `/memory`: `[[name]]` is `entities/name.md` unless a
    /// file of that path exists; `[[a/b]]` is `a/b.md` (or `a/b` when that file exists).
    pub target: String,
    /// Whether `target` exists.
    pub exists: bool,
}

/// `GET …/memory/links?path=`: a file's outgoing links and the files that link to it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryLinks {
    pub path: String,
    pub outgoing: Vec<MemoryLink>,
    /// Files whose links resolve to `path`, sorted.
    pub backlinks: Vec<String>,
}

/// One edge of the graph: `from` links to `to`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryEdge {
    pub from: String,
    pub to: String,
}

/// `GET …/memory/graph`: every indexed file and every link between files.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryGraph {
    /// Every indexed file, and every link target that does not exist (yet), sorted.
    pub nodes: Vec<MemoryNode>,
    pub edges: Vec<MemoryEdge>,
}

/// One node of the graph.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryNode {
    pub path: String,
    pub exists: bool,
}
