//! `memory_read`: what an agent's box remembers (its `/memory`), read without waking it, so
//! another agent can consult it.

use berth_basics::{path_segment, query_value};
use berth_protocol::memory::MemoryTree;
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
}
