//! Reading a box's `/memory` without waking it: a running box answers through its agent;
//! any other box (asleep, stopped, failed) from its volume image, parsed by berth's own
//! program confined in its volume-reader mode (`berth_image::read_volume`). The box's
//! lifecycle lock is held for the read, so it neither starts nor stops meanwhile, and
//! nothing about it is written: its state, events and idle clock stay as they were.
//!
//! A stopped box that moved here from a lost node has its volume restored from its durable
//! copy first (what its next start would do; its log says `volume_restored`).
//!
//! A paused sandbox box's volume is mounted on the host with writes in its page cache: it
//! is frozen (`FIFREEZE`, which writes them out) for the read and thawed after. A paused
//! or snapshotted VM's image is read as it is on disk, as a crash would leave it (the
//! reader replays the journal in memory); what its guest had not yet written out is not
//! there.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use berth_chunks::memory::{MemoryInput, MAX_SNAPSHOT_BYTES};
use berth_protocol::guest::{BoxUser, FileKind, FileQuery};
use berth_protocol::memory::{
    memory_path, steps, MemoryEntry, MemorySource, MemoryTree, VolumeRead, VolumeReadFailure,
    VolumeReadFailureKind as Why, MAX_READ_BYTES, MAX_TREE_DEPTH, MAX_TREE_ENTRIES, MEMORY_ROOT,
};
use berth_protocol::{BoxId, ErrorCode};
use berth_runtime::{error_chain, volume_image, GuestClient, GuestError, RuntimeError};
use berth_store::BoxState;
use bytes::Bytes;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::detached::{blocking, detached};
use crate::lifecycle::transition::{Kind, Transition};

/// berth's own program, which the daemon runs confined to read volume images: set once by
/// the `berth` binary at its start (a daemon embedded elsewhere, as in tests, has none and
/// answers a sleeping box's memory with `unavailable`).
static READER_PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Names berth's own program as the volume reader (see [`READER_PROGRAM`]).
pub fn set_reader_program(program: PathBuf) {
    let _ = READER_PROGRAM.set(program);
}

/// A running box's whole read: more is a box that does not answer.
const GUEST_DEADLINE: Duration = Duration::from_secs(30);

/// The tree below `path` of `/memory` (empty for all of it).
pub async fn tree(ctx: &Ctx, id: &BoxId, path: &str) -> Result<MemoryTree, OpError> {
    let rel = checked(path)?;
    let answer = read(ctx, id, VolumeRead::Tree { path: rel.clone() }).await?;
    match answer {
        Answer::Guest(client) => guest_tree(&client, &rel).await,
        Answer::Volume(bytes) => serde_json::from_slice(&bytes).map_err(|source| {
            OpError::MemoryReader(Box::new(berth_image::ImageError::BadReaderAnswer {
                source,
            }))
        }),
    }
}

/// The bytes of the regular file at `path` of `/memory` (at most [`MAX_READ_BYTES`]), and
/// where they were read from.
pub async fn file(ctx: &Ctx, id: &BoxId, path: &str) -> Result<(Bytes, MemorySource), OpError> {
    let rel = checked(path)?;
    if rel.is_empty() {
        return Err(memory_error(
            Why::IsADirectory,
            "/memory is a directory".into(),
        ));
    }
    let request = VolumeRead::File {
        path: rel.clone(),
        max_bytes: MAX_READ_BYTES,
    };
    match read(ctx, id, request).await? {
        Answer::Guest(client) => Ok((guest_file(&client, &rel).await?, MemorySource::Box)),
        Answer::Volume(bytes) => Ok((Bytes::from(bytes), MemorySource::Volume)),
    }
}

/// Where a read is answered from.
enum Answer {
    /// The box runs: ask its agent (after the lock is let go: the agent's answer needs no
    /// lock, and a slow one must not hold up the box's stop).
    Guest(GuestClient),
    /// What the volume reader printed.
    Volume(Vec<u8>),
}

async fn read(ctx: &Ctx, id: &BoxId, request: VolumeRead) -> Result<Answer, OpError> {
    let (ctx, id) = (ctx.clone(), id.clone());
    // Detached: a paused box's frozen volume is thawed even if the caller goes away.
    detached(&id.clone(), async move {
        let t = Transition::begin(&ctx, &id, Kind::Read).await?;
        let state = t.record().state;
        if state == BoxState::Running {
            if let Some(client) = t.live.client.clone() {
                return Ok(Answer::Guest(client));
            }
        }
        let program = READER_PROGRAM.get().cloned().ok_or(OpError::NoVolumeReader)?;
        if state == BoxState::Stopped {
            // A box moved here from a lost node: its volume comes from its durable copy
            // first, as its next start would do.
            crate::lifecycle::restore_if_moved(&t).await?;
        }
        let image = volume_image(&ctx.data_dir, &id);
        if !image.exists() && state == BoxState::Stopped {
            return never_booted(&request);
        }
        let frozen = state == BoxState::Paused && freeze(&t).await?;
        let cap = answer_cap(&request);
        let read = blocking(move || berth_image::read_volume(&program, &image, &request, cap)).await;
        if frozen {
            if let Err(e) = t.runtime()?.thaw_volume(&id).await {
                tracing::error!(box_id = %id, error = %error_chain(&e), "cannot thaw a paused box's volume after reading its memory; stop and start it");
            }
        }
        drop(t);
        let read = read.map_err(|source| OpError::TaskPanicked {
            id: id.clone(),
            source,
        })?;
        read.map(Answer::Volume).map_err(volume_error)
    })
    .await
}

/// A box never started has no volume yet: its memory is empty (it is seeded at the first
/// boot).
fn never_booted(request: &VolumeRead) -> Result<Answer, OpError> {
    match request {
        VolumeRead::Tree { path } if path.is_empty() => {
            let empty = MemoryTree {
                source: MemorySource::Volume,
                entries: Vec::new(),
                truncated: false,
            };
            Ok(Answer::Volume(serde_json::to_vec(&empty).expect("a tree serializes")))
        }
        VolumeRead::Tree { path } | VolumeRead::File { path, .. } => Err(memory_error(
            Why::NotFound,
            format!("/memory/{path} does not exist (the box has not started yet: its memory is made at its first boot)"),
        )),
        VolumeRead::Export { .. } => Err(memory_error(
            Why::NotFound,
            "the box has not started yet: its memory is made at its first boot".into(),
        )),
    }
}

/// Freezes a paused box's volume where its runtime can (`true`); a VM's image is read as
/// it is (`false`).
async fn freeze(t: &Transition<'_>) -> Result<bool, OpError> {
    match t.runtime()?.freeze_volume(t.id()).await {
        Ok(()) => Ok(true),
        Err(RuntimeError::Unsupported { .. }) => Ok(false),
        Err(e) => Err(crate::lifecycle::transition::runtime_error(
            "freeze the volume of",
            t.id(),
            e,
        )),
    }
}

/// The most a reader's answer may hold: a file's cap and a little, or a whole tree's JSON.
fn answer_cap(request: &VolumeRead) -> usize {
    match request {
        VolumeRead::File { max_bytes, .. } => usize::try_from(*max_bytes).unwrap_or(usize::MAX),
        VolumeRead::Tree { .. } => 64 << 20,
        VolumeRead::Export { max_bytes } => export_cap(*max_bytes),
    }
}

/// A tar of `max_bytes` of files: their headers and padding come on top (a 512-byte header
/// and up to 511 bytes of padding for each of at most `MAX_TREE_ENTRIES`).
fn export_cap(max_bytes: u64) -> usize {
    usize::try_from(max_bytes).unwrap_or(usize::MAX) + MAX_TREE_ENTRIES * 1024 + 4096
}

/// All of a box's `/memory` (its directories and regular files, for a snapshot), and where
/// it was read from: a running box's agent packs it, any other box's image is exported
/// by the volume reader, under the box's lock as [`tree`] is.
pub async fn export(ctx: &Ctx, id: &BoxId) -> Result<(Vec<MemoryInput>, MemorySource), OpError> {
    let request = VolumeRead::Export {
        max_bytes: MAX_SNAPSHOT_BYTES,
    };
    match read(ctx, id, request).await? {
        Answer::Guest(client) => Ok((guest_export(&client).await?, MemorySource::Box)),
        Answer::Volume(tar) => Ok((inputs_of(&tar)?, MemorySource::Volume)),
    }
}

/// [`export`] of a box whose lifecycle lock the caller holds and on which nothing runs:
/// its image, read by the volume reader. None when it has no image yet, or the daemon has
/// no reader program.
pub(crate) async fn export_image(
    ctx: &Ctx,
    id: &BoxId,
) -> Result<Option<Vec<MemoryInput>>, OpError> {
    let image = volume_image(&ctx.data_dir, id);
    let Some(program) = READER_PROGRAM.get().cloned() else {
        return Ok(None);
    };
    if !image.exists() {
        return Ok(None);
    }
    let request = VolumeRead::Export {
        max_bytes: MAX_SNAPSHOT_BYTES,
    };
    let cap = answer_cap(&request);
    let read = blocking(move || berth_image::read_volume(&program, &image, &request, cap))
        .await
        .map_err(|source| OpError::TaskPanicked {
            id: id.clone(),
            source,
        })?;
    inputs_of(&read.map_err(volume_error)?).map(Some)
}

fn inputs_of(tar: &[u8]) -> Result<Vec<MemoryInput>, OpError> {
    berth_chunks::memory::read_tar(tar).map_err(OpError::MemoryHistory)
}

/// A running box's `/memory` as its agent packs it, taken as it streams and refused past
/// what a snapshot may hold.
async fn guest_export(client: &GuestClient) -> Result<Vec<MemoryInput>, OpError> {
    let cap = export_cap(MAX_SNAPSHOT_BYTES);
    let read = async {
        let mut download = client
            .download_archive(&query(""))
            .await
            .map_err(|e| guest_error(e, ""))?;
        let mut tar = Vec::new();
        while let Some(chunk) = download
            .next_chunk()
            .await
            .map_err(|e| guest_error(e, ""))?
        {
            if tar.len() + chunk.len() > cap {
                return Err(memory_error(
                    Why::TooLarge,
                    format!(
                        "/memory holds more than the {} MiB a snapshot takes",
                        MAX_SNAPSHOT_BYTES >> 20
                    ),
                ));
            }
            tar.extend_from_slice(&chunk);
        }
        Ok(tar)
    };
    let tar = tokio::time::timeout(GUEST_DEADLINE * 4, read)
        .await
        .map_err(|_| guest_too_slow())??;
    inputs_of(&tar)
}

/// The walk of a running box's `/memory` below `rel`, one directory listing at a time, in
/// the same order and bounds as the volume reader's.
async fn guest_tree(client: &GuestClient, rel: &str) -> Result<MemoryTree, OpError> {
    let walk = async {
        let top = guest_stat_plain(client, rel).await?;
        if top.kind != FileKind::Dir {
            return Err(memory_error(
                Why::NotADirectory,
                format!("/memory/{rel} is not a directory"),
            ));
        }
        let mut tree = MemoryTree {
            source: MemorySource::Box,
            entries: Vec::new(),
            truncated: false,
        };
        // A stack of (directory, depth, its sorted entries still to visit), depth first.
        let mut stack = vec![(rel.to_owned(), 0usize, listing(client, rel).await?)];
        while let Some((dir, depth, mut rest)) = stack.pop() {
            let Some(entry) = rest.pop() else { continue };
            let path = if dir.is_empty() {
                entry.name.clone()
            } else {
                format!("{dir}/{}", entry.name)
            };
            stack.push((dir, depth, rest));
            if tree.entries.len() >= MAX_TREE_ENTRIES {
                tree.truncated = true;
                break;
            }
            tree.entries.push(MemoryEntry {
                size: if entry.kind == FileKind::Dir {
                    0
                } else {
                    entry.size
                },
                path: path.clone(),
                kind: entry.kind,
                modified: Some(entry.mtime),
                target: entry.symlink_target.clone(),
            });
            if entry.kind == FileKind::Dir {
                if depth + 1 >= MAX_TREE_DEPTH {
                    tree.truncated = true;
                } else {
                    stack.push((path.clone(), depth + 1, listing(client, &path).await?));
                }
            }
        }
        Ok(tree)
    };
    tokio::time::timeout(GUEST_DEADLINE, walk)
        .await
        .map_err(|_| guest_too_slow())?
}

/// The entries of `/memory/rel`, sorted in reverse (popped from the end in order).
async fn listing(
    client: &GuestClient,
    rel: &str,
) -> Result<Vec<berth_protocol::guest::FileEntry>, OpError> {
    let mut entries = client
        .list_files(&query(rel))
        .await
        .map_err(|e| guest_error(e, rel))?
        .entries;
    entries.retain(|e| e.name != "." && e.name != "..");
    entries.sort_by(|a, b| b.name.cmp(&a.name));
    Ok(entries)
}

async fn guest_file(client: &GuestClient, rel: &str) -> Result<Bytes, OpError> {
    let read = async {
        let entry = guest_stat_plain(client, rel).await?;
        match entry.kind {
            FileKind::File => {}
            FileKind::Dir => {
                return Err(memory_error(
                    Why::IsADirectory,
                    format!("/memory/{rel} is a directory"),
                ))
            }
            _ => {
                return Err(memory_error(
                    Why::NotARegularFile,
                    format!("/memory/{rel} is not a regular file"),
                ))
            }
        }
        if entry.size > MAX_READ_BYTES {
            return Err(too_large(rel, entry.size));
        }
        // Read as it streams, never past the cap: the file may have grown since its stat.
        let mut download = client
            .download_file(&query(rel))
            .await
            .map_err(|e| guest_error(e, rel))?;
        let mut bytes = Vec::new();
        while let Some(chunk) = download
            .next_chunk()
            .await
            .map_err(|e| guest_error(e, rel))?
        {
            if (bytes.len() + chunk.len()) as u64 > MAX_READ_BYTES {
                return Err(too_large(rel, (bytes.len() + chunk.len()) as u64));
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(bytes))
    };
    tokio::time::timeout(GUEST_DEADLINE, read)
        .await
        .map_err(|_| guest_too_slow())?
}

/// `stat` of `/memory/rel` and of each directory on the way, none of them a symlink (a
/// memory read never follows one, as the volume reader does not).
async fn guest_stat_plain(
    client: &GuestClient,
    rel: &str,
) -> Result<berth_protocol::guest::FileEntry, OpError> {
    let mut last = None;
    for step in steps(rel) {
        let entry = client
            .stat(&query(&step))
            .await
            .map_err(|e| guest_error(e, &step))?;
        if entry.kind == FileKind::Symlink {
            return Err(OpError::Memory(VolumeReadFailure::symlink(&step)));
        }
        last = Some(entry);
    }
    Ok(last.expect("the steps start at /memory itself"))
}

fn query(rel: &str) -> FileQuery {
    FileQuery {
        path: if rel.is_empty() {
            MEMORY_ROOT.to_owned()
        } else {
            format!("{MEMORY_ROOT}/{rel}")
        },
        user: BoxUser::User,
        ..FileQuery::default()
    }
}

/// A path below `/memory` as the API takes it, or `400` with the rule it breaks.
pub(crate) fn checked(path: &str) -> Result<String, OpError> {
    memory_path(path).map_err(|rule| OpError::InvalidPath {
        path: path.to_owned(),
        rule,
    })
}

fn too_large(rel: &str, size: u64) -> OpError {
    memory_error(
        Why::TooLarge,
        format!("/memory/{rel} has {size} bytes, more than the {MAX_READ_BYTES} a memory read answers: read it with GET /v1/boxes/{{ref}}/files"),
    )
}

fn memory_error(kind: Why, message: String) -> OpError {
    OpError::Memory(VolumeReadFailure { kind, message })
}

/// The agent's refusals that mean the same as the volume reader's become its kinds.
fn guest_error(e: GuestError, rel: &str) -> OpError {
    let kind = match e.code() {
        ErrorCode::NotFound => Why::NotFound,
        ErrorCode::IsADirectory => Why::IsADirectory,
        ErrorCode::NotADirectory => Why::NotADirectory,
        ErrorCode::NotARegularFile => Why::NotARegularFile,
        _ => return OpError::Guest(Box::new(e)),
    };
    let message = match kind {
        Why::NotFound => format!("/memory/{rel} does not exist"),
        _ => format!("/memory/{rel}: {}", error_chain(&e)),
    };
    memory_error(kind, message)
}

fn guest_too_slow() -> OpError {
    OpError::MemoryTimeout {
        after: GUEST_DEADLINE,
    }
}

fn volume_error(e: berth_image::ImageError) -> OpError {
    match e {
        berth_image::ImageError::VolumeRead { failure } => OpError::Memory(failure),
        other => OpError::MemoryReader(Box::new(other)),
    }
}
