//! `berth memory NAME cat PATH [--at SNAP]`: one file of a box's memory, as it is now or as
//! a snapshot holds it, written to stdout as it is.

use std::io::Write as _;

use anyhow::Context as _;
use berth_basics::path_segment;
use http::Method;
use http_body_util::BodyExt as _;

use crate::args::box_path;
use crate::client::Client;

/// Prints the file at `path` below /memory, as it is now or, with `at`, as that snapshot
/// holds it.
pub async fn cat(client: &Client, name: &str, path: &str, at: Option<&str>) -> anyhow::Result<u8> {
    let file = file_segments(name, path)?;
    let url = match at {
        None => box_path(name, &format!("/memory/{file}")),
        Some(at) => box_path(
            name,
            &format!("/memory/snapshots/{}/files/{file}", path_segment(at)),
        ),
    };
    print_body(client, &url).await
}

/// A file's path below /memory as URL path segments; refused (one line) when it is not a
/// plain relative path, or is /memory itself.
fn file_segments(name: &str, path: &str) -> anyhow::Result<String> {
    let rel = berth_protocol::memory::memory_path(path)
        .map_err(|why| anyhow::anyhow!("the memory path {path:?} {why}"))?;
    if rel.is_empty() {
        anyhow::bail!("/memory is a directory: list it with `berth memory {name} ls`");
    }
    let segments: Vec<String> = rel.split('/').map(path_segment).collect();
    Ok(segments.join("/"))
}

/// GETs `url` and writes its body to stdout as it is.
async fn print_body(client: &Client, url: &str) -> anyhow::Result<u8> {
    let response = client
        .send(Method::GET, url, "*/*", None, None, crate::client::empty())
        .await?;
    let bytes = response
        .into_body()
        .collect()
        .await
        .context("reading the file from the daemon")?
        .to_bytes();
    let mut out = std::io::stdout().lock();
    out.write_all(&bytes).context("writing to stdout")?;
    out.flush().context("writing to stdout")?;
    Ok(0)
}
