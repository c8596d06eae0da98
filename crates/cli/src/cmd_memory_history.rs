//! `berth memory NAME search|links|log|snapshot|diff|restore`: finding
//! things in a box's memory and going back in its history.

use std::io::Write as _;

use anyhow::Context as _;
use berth_basics::{path_segment, query_value};
use berth_protocol::memory_history::{
    ChangeKind, MemoryDiff, MemoryRestored, MemorySnapshot, MemorySnapshotList, RestoreRequest,
};
use berth_protocol::memory_search::{MemoryLinks, MemorySearchResults};
use http::Method;

use crate::args::box_path;
use crate::client::Client;
use crate::table::table;

pub async fn search(
    client: &Client,
    name: &str,
    query: &str,
    limit: usize,
    json: bool,
) -> anyhow::Result<u8> {
    let url = box_path(
        name,
        &format!("/memory/search?q={}&limit={limit}", query_value(query)),
    );
    let answer: serde_json::Value = client
        .json(Method::GET, &url, None::<&()>, "search results")
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{answer}")?;
    } else {
        let results: MemorySearchResults =
            serde_json::from_value(answer).context("reading the search results")?;
        if results.hits.is_empty() {
            writeln!(
                out,
                "nothing in {} files matches {query:?}",
                results.indexed_files
            )?;
        }
        for hit in &results.hits {
            writeln!(out, "{}", hit.path)?;
            let snippet = hit.snippet.split_whitespace().collect::<Vec<_>>().join(" ");
            if !snippet.is_empty() {
                writeln!(out, "    {snippet}")?;
            }
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

pub async fn links(client: &Client, name: &str, path: &str, json: bool) -> anyhow::Result<u8> {
    let url = box_path(name, &format!("/memory/links?path={}", query_value(path)));
    let answer: serde_json::Value = client.json(Method::GET, &url, None::<&()>, "links").await?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{answer}")?;
    } else {
        let links: MemoryLinks = serde_json::from_value(answer).context("reading the links")?;
        writeln!(out, "{} links to:", links.path)?;
        for link in &links.outgoing {
            let missing = if link.exists {
                ""
            } else {
                " (no such file yet)"
            };
            writeln!(out, "    [[{}]] -> {}{missing}", link.text, link.target)?;
        }
        writeln!(out, "linked from:")?;
        for from in &links.backlinks {
            writeln!(out, "    {from}")?;
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

pub async fn log(client: &Client, name: &str, json: bool) -> anyhow::Result<u8> {
    let url = box_path(name, "/memory/snapshots");
    let answer: serde_json::Value = client
        .json(Method::GET, &url, None::<&()>, "snapshots")
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{answer}")?;
    } else {
        let list: MemorySnapshotList =
            serde_json::from_value(answer).context("reading the snapshots")?;
        let rows: Vec<Vec<String>> = list
            .snapshots
            .iter()
            .map(|s| {
                vec![
                    s.id.clone(),
                    s.taken_at.clone(),
                    serde_json::to_value(s.reason)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    s.files.to_string(),
                    s.bytes.to_string(),
                    s.stored_bytes.to_string(),
                ]
            })
            .collect();
        write!(
            out,
            "{}",
            table(
                &["ID", "TAKEN", "REASON", "FILES", "BYTES", "STORED"],
                &rows
            )
        )?;
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

pub async fn snapshot(client: &Client, name: &str) -> anyhow::Result<u8> {
    let url = box_path(name, "/memory/snapshots");
    let taken: MemorySnapshot = client
        .json(Method::POST, &url, None::<&()>, "a snapshot")
        .await?;
    println!(
        "{} ({} files, {} bytes; {} bytes stored)",
        taken.id, taken.files, taken.bytes, taken.stored_bytes
    );
    Ok(0)
}

pub async fn diff(
    client: &Client,
    name: &str,
    from: &str,
    to: Option<&str>,
    path: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let mut query = Vec::new();
    if let Some(to) = to {
        query.push(format!("to={}", query_value(to)));
    }
    if let Some(path) = path {
        query.push(format!("path={}", query_value(path)));
    }
    let url = box_path(
        name,
        &format!(
            "/memory/snapshots/{}/diff?{}",
            path_segment(from),
            query.join("&")
        ),
    );
    let answer: serde_json::Value = client
        .json(Method::GET, &url, None::<&()>, "a diff")
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{answer}")?;
    } else {
        let diff: MemoryDiff = serde_json::from_value(answer).context("reading the diff")?;
        writeln!(out, "{} -> {}", diff.from, diff.to)?;
        for change in &diff.changes {
            let mark = match change.change {
                ChangeKind::Added => "+",
                ChangeKind::Removed => "-",
                ChangeKind::Modified => "M",
            };
            writeln!(out, "{mark} {}", change.path)?;
            if let Some(patch) = &change.patch {
                write!(out, "{patch}")?;
            }
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

pub async fn restore(
    client: &Client,
    name: &str,
    snapshot: &str,
    path: Option<&str>,
) -> anyhow::Result<u8> {
    let url = box_path(name, "/memory/restore");
    let request = RestoreRequest {
        snapshot: snapshot.to_owned(),
        path: path.map(str::to_owned),
    };
    let done: MemoryRestored = client
        .json(Method::POST, &url, Some(&request), "a restore")
        .await?;
    println!(
        "restored {} files from {} ({} removed); the memory before is snapshot {} (restore it to undo)",
        done.files, done.restored, done.removed, done.before.id
    );
    Ok(0)
}
