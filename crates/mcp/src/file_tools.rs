//! `box_read_file`, `box_write_file`, `box_list_files`: a box's files, in model-sized parts.
//!
//! The API streams a file whole; a read here skips to `offset` and keeps `max_bytes`, then
//! drops the rest of the stream, so a huge file costs only what is shown.

use base64::Engine as _;
use berth_basics::query_value;
use bytes::Bytes;
use http::Method;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::answer::{self, next_chunk};
use crate::api::{ApiRequest, RequestBody};
use crate::calls::{box_path, Cx};
use crate::error::ToolError;
use crate::limits::{MAX_LISTED_ENTRIES, MAX_WRITE_BYTES, READ_DEFAULT_BYTES, READ_MAX_BYTES};

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The box's name or id (bx_…).
    #[serde(rename = "box")]
    pub box_ref: String,
    /// The file's absolute path in the box, e.g. /home/user/notes.txt.
    pub path: String,
    /// The byte to start at (default 0): to read a long file part by part.
    #[serde(default)]
    pub offset: Option<u64>,
    /// How many bytes to read at most (default 32768, at most 131072).
    #[serde(default)]
    pub max_bytes: Option<u64>,
}

pub async fn read(cx: Cx<'_>, args: ReadArgs) -> Result<String, ToolError> {
    let offset = args.offset.unwrap_or(0);
    let max = args.max_bytes.unwrap_or(READ_DEFAULT_BYTES);
    if !(1..=READ_MAX_BYTES).contains(&max) {
        return Err(ToolError::Argument {
            field: "max_bytes",
            reason: "must be 1 to 131072",
        });
    }
    let path = box_path(
        &args.box_ref,
        &format!("/files?path={}", query_value(&args.path)),
    );
    let answer = answer::check(
        cx.call(ApiRequest::get(path).accepting("application/octet-stream"))
            .await?,
    )
    .await?;
    let size = answer
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let mut body = answer.body;
    let (mut skipped, mut kept) = (0u64, Vec::new());
    while (kept.len() as u64) < max {
        let Some(chunk) = next_chunk(&mut body).await? else {
            break;
        };
        let skip = (offset - skipped).min(chunk.len() as u64) as usize;
        skipped += skip as u64;
        let want = (max as usize - kept.len()).min(chunk.len() - skip);
        kept.extend_from_slice(&chunk[skip..skip + want]);
    }
    // The rest of the stream is dropped unread: the daemon stops sending.
    drop(body);
    Ok(render_read(&args.path, offset, &kept, size))
}

/// The bytes read, as text (or base64 when they are not UTF-8), and where the rest is.
fn render_read(path: &str, offset: u64, kept: &[u8], size: Option<u64>) -> String {
    let end = offset + kept.len() as u64;
    let (content, encoding) = match std::str::from_utf8(kept) {
        Ok(text) => (text.to_owned(), ""),
        // A cut may split a character: show what is whole as text still.
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => {
            let text = String::from_utf8_lossy(&kept[..e.valid_up_to()]).into_owned();
            (text, "")
        }
        Err(_) => (
            base64::engine::general_purpose::STANDARD.encode(kept),
            " (not UTF-8 text: base64)",
        ),
    };
    let shown_end = match encoding {
        "" => offset + content.len() as u64,
        _ => end,
    };
    let header = match size {
        Some(size) if shown_end < size => format!(
            "{path}: bytes {offset}..{shown_end} of {size}{encoding}; {} more: call again with \
             offset={shown_end}",
            size - shown_end
        ),
        Some(size) if offset >= size && size > 0 => {
            format!("{path}: offset {offset} is past the end ({size} bytes)")
        }
        Some(size) => format!("{path}: {size} bytes{encoding}, all shown"),
        None => format!("{path}: bytes {offset}..{shown_end}{encoding}"),
    };
    format!("{header}\n{content}")
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The box's name or id (bx_…).
    #[serde(rename = "box")]
    pub box_ref: String,
    /// The file's absolute path in the box; its directory must exist. An existing file is
    /// replaced (atomically).
    pub path: String,
    /// The whole new contents (at most 1 MiB).
    pub content: String,
    /// "utf8" (the default) or "base64" (binary contents).
    #[serde(default)]
    pub encoding: Option<Encoding>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Utf8,
    Base64,
}

pub async fn write(cx: Cx<'_>, args: WriteArgs) -> Result<String, ToolError> {
    let bytes = match args.encoding.unwrap_or(Encoding::Utf8) {
        Encoding::Utf8 => args.content.into_bytes(),
        Encoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(args.content.trim())
            .map_err(ToolError::Base64)?,
    };
    if bytes.len() > MAX_WRITE_BYTES {
        return Err(ToolError::WriteTooLarge {
            bytes: bytes.len(),
            max: MAX_WRITE_BYTES,
        });
    }
    let size = bytes.len();
    let path = box_path(
        &args.box_ref,
        &format!("/files?path={}", query_value(&args.path)),
    );
    let request = ApiRequest {
        method: Method::PUT,
        path_and_query: path,
        accept: "application/json",
        body: RequestBody::Bytes(Bytes::from(bytes)),
    };
    answer::empty(cx.call(request).await?).await?;
    Ok(format!("wrote {size} bytes to {}", args.path))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListFilesArgs {
    /// The box's name or id (bx_…).
    #[serde(rename = "box")]
    pub box_ref: String,
    /// The directory's absolute path in the box (default /home/user).
    #[serde(default)]
    pub path: Option<String>,
}

pub async fn list(cx: Cx<'_>, args: ListFilesArgs) -> Result<String, ToolError> {
    let dir = args.path.unwrap_or_else(|| "/home/user".to_owned());
    let path = box_path(
        &args.box_ref,
        &format!("/files/list?path={}", query_value(&dir)),
    );
    let listed: Value =
        answer::json(cx.call(ApiRequest::get(path)).await?, "a directory list").await?;
    let entries = listed["entries"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    Ok(render_list(&dir, entries))
}

/// One entry a line, `ls -l`-like: kind, size, name (a directory ends in `/`).
fn render_list(dir: &str, entries: &[Value]) -> String {
    if entries.is_empty() {
        return format!("{dir}: empty");
    }
    let mut lines = vec![format!("{dir}: {} entries", entries.len())];
    for entry in entries.iter().take(MAX_LISTED_ENTRIES) {
        let name = entry["name"].as_str().unwrap_or("?");
        let kind = entry["kind"].as_str().unwrap_or("other");
        let size = entry["size"].as_u64().unwrap_or(0);
        let suffix = if kind == "dir" { "/" } else { "" };
        lines.push(format!("{kind:<7} {size:>10}  {name}{suffix}"));
    }
    if entries.len() > MAX_LISTED_ENTRIES {
        lines.push(format!(
            "[… {} more entries left out; list a subdirectory, or use box_exec with `ls`/`find`]",
            entries.len() - MAX_LISTED_ENTRIES
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_partial_read_says_where_the_rest_starts() {
        assert_eq!(
            render_read("/a", 0, b"hello", Some(12)),
            "/a: bytes 0..5 of 12; 7 more: call again with offset=5\nhello"
        );
        assert_eq!(
            render_read("/a", 0, b"hi", Some(2)),
            "/a: 2 bytes, all shown\nhi"
        );
        assert_eq!(
            render_read("/a", 9, b"", Some(3)),
            "/a: offset 9 is past the end (3 bytes)\n"
        );
        // A cut inside a character: the whole characters are text, the next read starts
        // at the cut one.
        assert_eq!(
            render_read("/a", 0, "hé".as_bytes().split_at(2).0, Some(3)),
            "/a: bytes 0..1 of 3; 2 more: call again with offset=1\nh"
        );
        assert_eq!(
            render_read("/b", 0, &[0xff, 0x00], Some(2)),
            "/b: 2 bytes (not UTF-8 text: base64), all shown\n/wA="
        );
    }

    #[test]
    fn long_listings_are_cut_with_a_note() {
        let entries: Vec<Value> = (0..MAX_LISTED_ENTRIES + 5)
            .map(|i| json!({"name": format!("f{i}"), "kind": "file", "size": i}))
            .collect();
        let text = render_list("/d", &entries);
        assert!(
            text.starts_with("/d: 205 entries\nfile             0  f0\n"),
            "{text}"
        );
        assert!(text.ends_with(
            "[… 5 more entries left out; list a subdirectory, or use box_exec with `ls`/`find`]"
        ));
        assert_eq!(
            render_list("/d", &[json!({"name":"sub","kind":"dir","size":4096})]),
            "/d: 1 entries\ndir           4096  sub/"
        );
    }
}
