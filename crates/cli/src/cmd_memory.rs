//! `berth memory NAME …`: a box's `/memory`, read without waking it.

use std::io::Write as _;

use anyhow::Context as _;
use berth_basics::{path_segment, query_value};
use berth_protocol::guest::FileKind;
use berth_protocol::memory::MemoryTree;
use clap::{Args, Subcommand};
use http::Method;
use http_body_util::BodyExt as _;

use crate::args::box_path;
use crate::client::Client;
use crate::table::table;

#[derive(Debug, Args)]
#[command(after_help = "\
A running box answers through its agent; a sleeping or stopped one is read from its \
volume image, and stays asleep (its state and events are not touched). Paths are below \
/memory (`entities/alice.md`). Symlinks are listed, never followed.")]
pub struct MemoryArgs {
    /// The box's name or id (`bx_…`).
    pub name: String,
    #[command(subcommand)]
    pub command: MemoryCommand,
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// List the memory (or a directory of it), parents before their children.
    Ls {
        /// A directory below /memory (default: all of it).
        #[arg(default_value = "")]
        path: String,
        /// Print the daemon's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Print a file of the memory.
    Cat {
        /// The file's path below /memory.
        path: String,
    },
}

pub async fn run(client: &Client, args: MemoryArgs) -> anyhow::Result<u8> {
    match args.command {
        MemoryCommand::Ls { path, json } => ls(client, &args.name, &path, json).await,
        MemoryCommand::Cat { path } => cat(client, &args.name, &path).await,
    }
}

async fn ls(client: &Client, name: &str, path: &str, json: bool) -> anyhow::Result<u8> {
    let url = box_path(name, &format!("/memory?path={}", query_value(path)));
    let tree: serde_json::Value = client
        .json(Method::GET, &url, None::<&()>, "a memory tree")
        .await?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{tree}")?;
    } else {
        let tree: MemoryTree = serde_json::from_value(tree).context("reading the memory tree")?;
        let rows: Vec<Vec<String>> = tree
            .entries
            .iter()
            .map(|e| {
                let shown = match (&e.kind, &e.target) {
                    (FileKind::Dir, _) => format!("{}/", e.path),
                    (FileKind::Symlink, Some(target)) => format!("{} -> {target}", e.path),
                    _ => e.path.clone(),
                };
                vec![e.size.to_string(), shown]
            })
            .collect();
        write!(out, "{}", table(&["SIZE", "PATH"], &rows))?;
        if tree.truncated {
            writeln!(
                out,
                "(cut: the memory has more entries than one answer holds)"
            )?;
        }
    }
    out.flush().context("writing to stdout")?;
    Ok(0)
}

async fn cat(client: &Client, name: &str, path: &str) -> anyhow::Result<u8> {
    let rel = berth_protocol::memory::memory_path(path)
        .map_err(|why| anyhow::anyhow!("the memory path {path:?} {why}"))?;
    if rel.is_empty() {
        anyhow::bail!("/memory is a directory: list it with `berth memory {name} ls`");
    }
    let segments: Vec<String> = rel.split('/').map(path_segment).collect();
    let url = box_path(name, &format!("/memory/{}", segments.join("/")));
    let response = client
        .send(Method::GET, &url, "*/*", None, None, crate::client::empty())
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
