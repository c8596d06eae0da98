//! `berth backup NAME -o FILE` and `berth restore FILE`: a whole box (volume, memory
//! history, settings) as one file, and that file made into a new box. Both stream: the
//! CLI holds a chunk at a time, never the file.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use anyhow::{bail, Context as _};
use clap::Args;
use futures_util::TryStreamExt as _;
use http::Method;
use http_body_util::{BodyExt as _, StreamBody};
use hyper::body::Frame;
use serde::Deserialize;
use tokio_util::io::ReaderStream;

use crate::args::box_path;
use crate::client::{query_value, Client};
use crate::progress::{human, Progress};

const CHUNK_BYTES: usize = 256 * 1024;

#[derive(Debug, Args)]
#[command(after_help = "\
The file holds the box's volume (its holes left out), its memory history and its settings, \
with a sha256 of every part. A running box is held still (its volume frozen, or the box \
paused) only while its volume is staged, then keeps running. Restore it with \
`berth restore FILE`.")]
pub struct BackupArgs {
    /// The box (name or bx_… id).
    pub name: String,
    /// Where to write the backup; `-`: stdout. Default: NAME-<UTC time>.tar.zst here.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "\
The file is read and checked whole before anything is made: a damaged, cut short or \
changed file is refused with the reason, and no box is created. The new box has a new id, \
the backed-up box's settings, volume and memory history, and is stopped.")]
pub struct RestoreArgs {
    /// A file `berth backup` wrote (or a scheduled backup); `-`: stdin.
    pub file: PathBuf,
    /// The new box's name. Default: the backed-up box's.
    #[arg(long)]
    pub name: Option<String>,
    /// Restore into this tenant (name or tn_… id; admin key needed). Default: the key's.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Run the new box on this runtime (sandbox, qemu, …). Default: the backed-up box's.
    #[arg(long)]
    pub runtime: Option<String>,
    /// Make the new box from this template. Default: the backed-up box's.
    #[arg(long)]
    pub template: Option<String>,
    /// Print the daemon's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn backup(client: &Client, args: BackupArgs) -> anyhow::Result<()> {
    let response = client
        .send(
            Method::GET,
            &box_path(&args.name, "/backup"),
            "application/zstd",
            None,
            None,
            crate::client::empty(),
        )
        .await?;
    let offered = offered_name(response.headers());
    let mut body = response.into_body();
    let cut = |e: hyper::Error| {
        anyhow::anyhow!(
            "the backup was cut short ({e}); the daemon's log says why; run berth backup again"
        )
    };
    if args.output.as_deref() == Some(Path::new("-")) {
        let mut out = std::io::stdout().lock();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(cut)?.into_data() {
                out.write_all(&data).context("writing to stdout")?;
            }
        }
        return out.flush().context("writing to stdout");
    }
    let dest = args.output.unwrap_or_else(|| {
        PathBuf::from(offered.unwrap_or_else(|| format!("{}.tar.zst", args.name)))
    });
    let progress = Progress::start(format!("{} -> {}", args.name, dest.display()));
    let counted = progress.bytes.clone();
    crate::cmd_cp::save(
        body,
        &dest,
        "the backup was cut short (the daemon's log says why); run berth backup again",
        |n| {
            counted.fetch_add(n as u64, Ordering::Relaxed);
        },
    )
    .await?;
    let bytes = progress.bytes.load(Ordering::Relaxed);
    progress.finish(&format!(
        "backed up {} to {} ({})",
        args.name,
        dest.display(),
        human(bytes)
    ));
    Ok(())
}

/// The file name in the answer's `Content-Disposition`, if it is a plain one.
fn offered_name(headers: &http::HeaderMap) -> Option<String> {
    let value = headers
        .get(http::header::CONTENT_DISPOSITION)?
        .to_str()
        .ok()?;
    let name = value.split("filename=\"").nth(1)?.strip_suffix('"')?;
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    plain.then(|| name.to_owned())
}

/// What we read of the daemon's answer; lenient, as the API may add fields.
#[derive(Debug, Deserialize, serde::Serialize)]
struct Restored {
    #[serde(rename = "box")]
    restored: RestoredBox,
    from: Origin,
    volume_bytes: u64,
    memory_snapshots: u64,
    #[serde(default)]
    notes: Vec<String>,
}

#[derive(Debug, Deserialize, serde::Serialize)]
struct RestoredBox {
    id: String,
    name: String,
    runtime: String,
}

#[derive(Debug, Deserialize, serde::Serialize)]
struct Origin {
    name: String,
    created_at: String,
}

pub async fn restore(client: &Client, args: RestoreArgs) -> anyhow::Result<()> {
    let mut query = Vec::new();
    for (key, value) in [
        ("name", &args.name),
        ("tenant", &args.tenant),
        ("runtime", &args.runtime),
        ("template", &args.template),
    ] {
        if let Some(value) = value {
            query.push(format!("{key}={}", query_value(value)));
        }
    }
    let path = if query.is_empty() {
        "/v1/backups/restore".to_owned()
    } else {
        format!("/v1/backups/restore?{}", query.join("&"))
    };
    let progress = Progress::start(format!("{} -> the daemon", args.file.display()));
    let counted = progress.bytes.clone();
    let (reader, length): (
        Box<dyn tokio::io::AsyncRead + Send + Sync + Unpin>,
        Option<u64>,
    ) = if args.file == Path::new("-") {
        (Box::new(tokio::io::stdin()), None)
    } else {
        let file = tokio::fs::File::open(&args.file)
            .await
            .with_context(|| format!("cannot open {}", args.file.display()))?;
        let meta = file
            .metadata()
            .await
            .with_context(|| format!("cannot read {}", args.file.display()))?;
        if !meta.is_file() {
            bail!("{} is not a file", args.file.display());
        }
        (Box::new(file), Some(meta.len()))
    };
    let stream = ReaderStream::with_capacity(reader, CHUNK_BYTES).inspect_ok(move |chunk| {
        counted.fetch_add(chunk.len() as u64, Ordering::Relaxed);
    });
    let body = StreamBody::new(stream.map_ok(Frame::data)).boxed();
    let response = client
        .send(
            Method::POST,
            &path,
            "application/json",
            Some("application/zstd"),
            length,
            body,
        )
        .await?;
    let answer = response
        .into_body()
        .collect()
        .await
        .context("reading the daemon's answer")?
        .to_bytes();
    let restored: Restored =
        serde_json::from_slice(&answer).context("decoding the daemon's answer")?;
    if args.json {
        progress.finish("restored");
        let value: serde_json::Value =
            serde_json::from_slice(&answer).context("decoding the daemon's answer")?;
        return crate::output::json(&mut std::io::stdout().lock(), &value);
    }
    let b = &restored.restored;
    progress.finish(&format!(
        "restored {} ({}, {}) from the backup of {} taken {}: {} of volume, {} memory snapshots",
        b.name,
        b.id,
        b.runtime,
        restored.from.name,
        restored.from.created_at,
        human(restored.volume_bytes),
        restored.memory_snapshots
    ));
    for note in &restored.notes {
        eprintln!("note: {note}");
    }
    println!("{}", b.name);
    Ok(())
}
