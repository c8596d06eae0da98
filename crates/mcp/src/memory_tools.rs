//! `memory_read` and `memory_search`: what an agent's box remembers (its `/memory`), read
//! or searched without waking it, so another agent can consult it.

use berth_basics::{path_segment, query_value};
use berth_protocol::memory::MemoryTree;
use berth_protocol::memory_search::{MemorySearchResults, MAX_SEARCH_LIMIT};
use http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::answer::{self, read_up_to};
use crate::api::ApiRequest;
use crate::calls::{box_path, Cx};
use crate::error::ToolError;
use crate::limits::{MAX_LISTED_ENTRIES, READ_MAX_BYTES};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryReadArgs {
    /// The box's name or id (bx_…).
    #[serde(rename = "box")]
    pub box_ref: String,
    /// A file or directory below /memory, e.g. entities/alice.md (default: the whole memory,
    /// listed).
    #[serde(default)]
    pub path: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchArgs {
    /// The box's name or id (bx_…).
    #[serde(rename = "box")]
    pub box_ref: String,
    /// The words to find (any of them; accents and case do not matter), e.g. "alice oslo".
    pub query: String,
    /// The most files to return, best first: 1 to 100 (default 20).
    #[serde(default)]
    pub limit: Option<usize>,
}

pub async fn read(cx: Cx<'_>, args: MemoryReadArgs) -> Result<String, ToolError> {
    let rel =
        berth_protocol::memory::memory_path(&args.path).map_err(|reason| ToolError::Argument {
            field: "path",
            reason,
        })?;
    if !rel.is_empty() {
        let segments: Vec<String> = rel.split('/').map(path_segment).collect();
        let path = box_path(&args.box_ref, &format!("/memory/{}", segments.join("/")));
        let answer = cx.call(ApiRequest::get(path).accepting("*/*")).await?;
        match answer::check(answer).await {
            Ok(answer) => {
                let mut body = answer.body;
                let (bytes, more) = read_up_to(&mut body, READ_MAX_BYTES as usize).await?;
                return Ok(render_file(&rel, &bytes, more));
            }
            Err(ToolError::Api { status, code, .. })
                if status == StatusCode::BAD_REQUEST
                    && code == berth_protocol::ErrorCode::IsADirectory => {}
            Err(e) => return Err(e),
        }
    }
    let path = box_path(
        &args.box_ref,
        &format!("/memory?path={}", query_value(&rel)),
    );
    let tree: MemoryTree =
        answer::json(cx.call(ApiRequest::get(path)).await?, "a memory tree").await?;
    Ok(render_tree(&rel, &tree))
}

pub async fn search(cx: Cx<'_>, args: MemorySearchArgs) -> Result<String, ToolError> {
    if args.query.trim().is_empty() {
        return Err(ToolError::Argument {
            field: "query",
            reason: "has no words to find",
        });
    }
    let mut path = box_path(
        &args.box_ref,
        &format!("/memory/search?q={}", query_value(&args.query)),
    );
    if let Some(limit) = args.limit {
        if !(1..=MAX_SEARCH_LIMIT).contains(&limit) {
            return Err(ToolError::Argument {
                field: "limit",
                reason: "must be 1 to 100",
            });
        }
        path.push_str(&format!("&limit={limit}"));
    }
    let results: MemorySearchResults = answer::json(
        cx.call(ApiRequest::get(path)).await?,
        "memory search results",
    )
    .await?;
    Ok(render_hits(&results))
}

/// One hit a paragraph: its path, then its snippet indented.
fn render_hits(results: &MemorySearchResults) -> String {
    let query = &results.query;
    let indexed = results.indexed_files;
    if results.hits.is_empty() {
        return format!("/memory: no file matches {query:?} ({indexed} files searched)");
    }
    let matched = match results.hits.len() {
        1 => "1 file matches".to_owned(),
        n => format!("{n} files match"),
    };
    let mut lines = vec![format!(
        "/memory: {matched} {query:?} (of {indexed}), best first"
    )];
    for hit in &results.hits {
        lines.push(hit.path.clone());
        lines.extend(hit.snippet.lines().map(|line| format!("  {line}")));
    }
    lines.push("[read a whole file with memory_read]".into());
    lines.join("\n")
}

fn render_file(rel: &str, bytes: &[u8], more: bool) -> String {
    let text = String::from_utf8_lossy(bytes);
    let cut = if more {
        format!("\n[… cut at {READ_MAX_BYTES} bytes; read the rest with box_read_file on /memory/{rel}]")
    } else {
        String::new()
    };
    format!("/memory/{rel}:\n{text}{cut}")
}

/// One entry a line: size and path (a directory ends in `/`, a symlink shows its target).
fn render_tree(rel: &str, tree: &MemoryTree) -> String {
    let dir = if rel.is_empty() {
        "/memory".to_owned()
    } else {
        format!("/memory/{rel}")
    };
    if tree.entries.is_empty() {
        return format!("{dir}: empty");
    }
    let mut lines = vec![format!("{dir}: {} entries", tree.entries.len())];
    for e in tree.entries.iter().take(MAX_LISTED_ENTRIES) {
        let shown = match (&e.kind, &e.target) {
            (berth_protocol::guest::FileKind::Dir, _) => format!("{}/", e.path),
            (_, Some(target)) => format!("{} -> {target}", e.path),
            _ => e.path.clone(),
        };
        lines.push(format!("{:>10}  {shown}", e.size));
    }
    if tree.entries.len() > MAX_LISTED_ENTRIES || tree.truncated {
        lines.push("[… more entries left out; read a subdirectory]".into());
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_protocol::guest::FileKind;
    use berth_protocol::memory::{MemoryEntry, MemorySource};

    #[test]
    fn a_tree_is_one_entry_a_line() {
        let entry = |path: &str, kind, size| MemoryEntry {
            path: path.into(),
            kind,
            size,
            modified: None,
            target: None,
        };
        let tree = MemoryTree {
            source: MemorySource::Volume,
            entries: vec![
                entry("entities", FileKind::Dir, 0),
                entry("entities/a.md", FileKind::File, 12),
            ],
            truncated: false,
        };
        assert_eq!(
            render_tree("", &tree),
            "/memory: 2 entries\n         0  entities/\n        12  entities/a.md"
        );
        assert_eq!(render_file("a.md", b"hi", false), "/memory/a.md:\nhi");
        assert!(render_file("a.md", b"hi", true).contains("cut at 131072 bytes"));
    }

    #[test]
    fn search_hits_are_a_path_then_its_snippet_indented() {
        use berth_protocol::memory_search::MemoryHit;
        let mut results = MemorySearchResults {
            query: "oslo".into(),
            hits: vec![MemoryHit {
                path: "entities/alice.md".into(),
                score: 1.5,
                snippet: "Alice\nmoved to Oslo".into(),
                highlights: vec![[15, 19]],
            }],
            indexed_files: 7,
        };
        assert_eq!(
            render_hits(&results),
            "/memory: 1 file matches \"oslo\" (of 7), best first\nentities/alice.md\n  Alice\n  \
             moved to Oslo\n[read a whole file with memory_read]"
        );
        results.hits.clear();
        assert_eq!(
            render_hits(&results),
            "/memory: no file matches \"oslo\" (7 files searched)"
        );
    }
}
