//! `berth memory NAME …`: a box's `/memory`, read without waking it.

use std::io::Write as _;

use anyhow::Context as _;
use berth_basics::query_value;
use berth_protocol::guest::FileKind;
use berth_protocol::memory::MemoryTree;
use clap::{Args, Subcommand};
use http::Method;

use crate::args::box_path;
use crate::client::Client;
use crate::table::table;

#[derive(Debug, Args)]
#[command(after_help = "\
A running box answers through its agent; a sleeping or stopped one is read from its \
volume image, and stays asleep (its state and events are not touched). Paths are below \
/memory (`entities/alice.md`). Symlinks are listed, never followed. A snapshot of the \
memory is taken at each stop that changed it (`log`); `restore` brings one back.")]
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
    /// Print a file of the memory (or of one of its snapshots).
    Cat {
        /// The file's path below /memory.
        path: String,
        /// Read it as the snapshot SNAP holds it (an id from `log`).
        #[arg(long, value_name = "SNAP")]
        at: Option<String>,
    },
    /// Find files by their words, best first, each with a snippet.
    Search {
        /// The words to find.
        #[arg(required = true, num_args = 1..)]
        words: Vec<String>,
        /// Most hits (1–100).
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print the daemon's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// A file's [[links]] and the files that link to it.
    Links {
        /// The file's path below /memory.
        path: String,
        /// Print the daemon's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// List the memory's snapshots, oldest first.
    Log {
        /// Print the daemon's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Take a snapshot of the memory now.
    Snapshot,
    /// What changed from snapshot FROM to TO (default: the newest).
    Diff {
        from: String,
        to: Option<String>,
        /// Only below this path; a single changed file of text is shown as a patch.
        #[arg(long)]
        path: Option<String>,
        /// Print the daemon's JSON answer.
        #[arg(long)]
        json: bool,
    },
    /// Bring the memory (or PATH of it) back as snapshot SNAP held it; the memory as it is
    /// now is kept as a snapshot first. Wakes the box.
    Restore {
        snapshot: String,
        /// A file or directory below /memory (default: all of it).
        path: Option<String>,
    },
}

pub async fn run(client: &Client, args: MemoryArgs) -> anyhow::Result<u8> {
    match args.command {
        MemoryCommand::Ls { path, json } => ls(client, &args.name, &path, json).await,
        MemoryCommand::Cat { path, at } => {
            crate::cmd_memory_cat::cat(client, &args.name, &path, at.as_deref()).await
        }
        MemoryCommand::Search { words, limit, json } => {
            crate::cmd_memory_history::search(client, &args.name, &words.join(" "), limit, json)
                .await
        }
        MemoryCommand::Links { path, json } => {
            crate::cmd_memory_history::links(client, &args.name, &path, json).await
        }
        MemoryCommand::Log { json } => {
            crate::cmd_memory_history::log(client, &args.name, json).await
        }
        MemoryCommand::Snapshot => crate::cmd_memory_history::snapshot(client, &args.name).await,
        MemoryCommand::Diff {
            from,
            to,
            path,
            json,
        } => {
            crate::cmd_memory_history::diff(
                client,
                &args.name,
                &from,
                to.as_deref(),
                path.as_deref(),
                json,
            )
            .await
        }
        MemoryCommand::Restore { snapshot, path } => {
            crate::cmd_memory_history::restore(client, &args.name, &snapshot, path.as_deref()).await
        }
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
