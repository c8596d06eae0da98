//! Snapshots of a box's `/memory`: one at each stop or sleep whose memory changed (taken
//! from the volume image while the lifecycle holds the box still), one on request
//! (`POST …/memory/snapshots`, from the running box's agent or its image), and one before
//! every restore. After each, the retention policy drops what it no longer keeps, and the
//! box's search index is brought up to the snapshot.

use berth_chunks::memory::{diff as diff_files, MemoryInput, SnapshotFiles, TakeSnapshot};
use berth_protocol::guest::FileKind;
use berth_protocol::memory_history::{
    MemoryDiff, MemorySnapshot, MemorySnapshotList, MemorySnapshotTree, SnapshotEntry,
    SnapshotReason,
};
use berth_protocol::BoxId;
use berth_runtime::error_chain;
use bytes::Bytes;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::transition::Transition;
use crate::ops::memory_read::{self, checked};

/// The largest file a diff shows a patch of.
const MAX_PATCH_BYTES: u64 = 1 << 20;

/// After a stop or sleep, with the box held and nothing running: a snapshot of its memory
/// as its image holds it, if that changed since the last. A failure is logged: the stop
/// stands.
pub(crate) async fn at_stop(t: &Transition<'_>) {
    let (ctx, id) = (t.ctx(), t.id());
    let inputs = match memory_read::export_image(ctx, id).await {
        Ok(Some(inputs)) => inputs,
        Ok(None) => return, // never started, or no reader program
        Err(e) => {
            tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot read the box's memory for its snapshot");
            return;
        }
    };
    if let Err(e) = record(ctx, id, inputs, SnapshotReason::Stop).await {
        tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot take a snapshot of the box's memory");
    }
}

/// A snapshot of the box's memory now, whatever its state (its state does not change).
pub async fn take(
    ctx: &Ctx,
    id: &BoxId,
    reason: SnapshotReason,
) -> Result<MemorySnapshot, OpError> {
    let (inputs, _) = memory_read::export(ctx, id).await?;
    record(ctx, id, inputs, reason).await
}

/// Stores `inputs` as a snapshot (at a stop: only if changed), applies the retention
/// policy, and refreshes the search index from them. The snapshot taken, or the newest
/// when a stop's memory had not changed.
pub(crate) async fn record(
    ctx: &Ctx,
    id: &BoxId,
    inputs: Vec<MemoryInput>,
    reason: SnapshotReason,
) -> Result<MemorySnapshot, OpError> {
    let memory = &ctx.memory;
    let turn = memory.snapshot_turn(id);
    let _turn = turn.lock().await;
    let box_id = id.to_string();
    let index_inputs = inputs.clone();
    let take = TakeSnapshot {
        box_id: &box_id,
        reason,
        inputs,
    };
    let history = &memory.history;
    let taken = if reason == SnapshotReason::Stop {
        history.take_if_changed(take).await
    } else {
        history.take(take).await.map(Some)
    }
    .map_err(OpError::MemoryHistory)?;
    let snapshot = match taken {
        Some(snapshot) => {
            tracing::info!(box_id = %id, snapshot = %snapshot.id, reason = ?reason, files = snapshot.files, stored_bytes = snapshot.stored_bytes, "memory snapshot taken");
            prune(ctx, id).await;
            snapshot
        }
        None => history
            .latest(&box_id)
            .await
            .map_err(OpError::MemoryHistory)?
            .expect("an unchanged memory has a newest snapshot"),
    };
    crate::memory::search::refresh_from(ctx, id, index_inputs, &snapshot.root).await;
    Ok(snapshot)
}

/// Drops the snapshots the retention policy no longer keeps. Logged, never failing.
async fn prune(ctx: &Ctx, id: &BoxId) {
    let history = &ctx.memory.history;
    let box_id = id.to_string();
    let dropped = async {
        let snapshots = history.list(&box_id).await?;
        let taken: Vec<i64> = snapshots.iter().map(unix_of).collect();
        let keep = ctx.memory.retention.keep(&taken, unix_now());
        let doomed: Vec<String> = snapshots
            .iter()
            .zip(keep)
            .filter(|(_, keep)| !keep)
            .map(|(s, _)| s.id.clone())
            .collect();
        history.forget(&box_id, &doomed).await?;
        Ok::<_, berth_chunks::ChunkError>(doomed.len())
    };
    match dropped.await {
        Ok(0) => {}
        Ok(n) => {
            tracing::info!(box_id = %id, dropped = n, "memory snapshots past their retention dropped")
        }
        Err(e) => {
            tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot apply the memory retention policy")
        }
    }
}

fn unix_of(s: &MemorySnapshot) -> i64 {
    s.id[3..].parse::<i64>().unwrap_or(0) / 1000
}

fn unix_now() -> i64 {
    time::OffsetDateTime::now_utc().unix_timestamp()
}

pub async fn list(ctx: &Ctx, id: &BoxId) -> Result<MemorySnapshotList, OpError> {
    let snapshots = ctx
        .memory
        .history
        .list(&id.to_string())
        .await
        .map_err(OpError::MemoryHistory)?;
    Ok(MemorySnapshotList { snapshots })
}

/// The snapshot `snapshot` of the box, or 404.
pub(crate) async fn find(ctx: &Ctx, id: &BoxId, snapshot: &str) -> Result<MemorySnapshot, OpError> {
    ctx.memory
        .history
        .get(&id.to_string(), snapshot)
        .await
        .map_err(OpError::MemoryHistory)?
        .ok_or_else(|| OpError::NoSuchSnapshot {
            box_id: id.clone(),
            snapshot: snapshot.to_owned(),
        })
}

pub(crate) async fn files_of(
    ctx: &Ctx,
    snapshot: &MemorySnapshot,
) -> Result<SnapshotFiles, OpError> {
    ctx.memory
        .history
        .files(snapshot)
        .await
        .map_err(OpError::MemoryHistory)
}

pub async fn tree(ctx: &Ctx, id: &BoxId, snapshot: &str) -> Result<MemorySnapshotTree, OpError> {
    let snapshot = find(ctx, id, snapshot).await?;
    let entries = files_of(ctx, &snapshot)
        .await?
        .into_iter()
        .map(|(path, f)| SnapshotEntry {
            path,
            kind: if f.is_dir {
                FileKind::Dir
            } else {
                FileKind::File
            },
            size: f.size,
        })
        .collect();
    Ok(MemorySnapshotTree { snapshot, entries })
}

/// A file as the snapshot holds it.
pub async fn read_file(
    ctx: &Ctx,
    id: &BoxId,
    snapshot: &str,
    path: &str,
) -> Result<Bytes, OpError> {
    let rel = checked(path)?;
    let snapshot = find(ctx, id, snapshot).await?;
    let files = files_of(ctx, &snapshot).await?;
    let file = files
        .get(&rel)
        .filter(|f| !f.is_dir)
        .ok_or_else(|| OpError::NotInSnapshot {
            snapshot: snapshot.id.clone(),
            path: rel.clone(),
        })?;
    ctx.memory
        .history
        .read(file)
        .await
        .map_err(OpError::MemoryHistory)
}

/// What changed from `from` to `to` (default: the newest snapshot); only below `path` when
/// given, with a patch of a single file's text.
pub async fn diff(
    ctx: &Ctx,
    id: &BoxId,
    from: &str,
    to: Option<&str>,
    path: Option<&str>,
) -> Result<MemoryDiff, OpError> {
    let rel = path.map(checked).transpose()?;
    let before = find(ctx, id, from).await?;
    let after = match to {
        Some(to) => find(ctx, id, to).await?,
        None => ctx
            .memory
            .history
            .latest(&id.to_string())
            .await
            .map_err(OpError::MemoryHistory)?
            .unwrap_or_else(|| before.clone()),
    };
    let (a, b) = (files_of(ctx, &before).await?, files_of(ctx, &after).await?);
    let mut changes = diff_files(&a, &b);
    if let Some(rel) = rel.as_deref().filter(|r| !r.is_empty()) {
        changes.retain(|c| c.path == rel || c.path.starts_with(&format!("{rel}/")));
        if let [one] = changes.as_mut_slice() {
            one.patch = patch(ctx, a.get(&one.path), b.get(&one.path), &one.path).await?;
        }
    }
    Ok(MemoryDiff {
        from: before.id,
        to: after.id,
        changes,
    })
}

/// A unified diff of one file's two versions, when both are text of at most
/// [`MAX_PATCH_BYTES`] (a side that is absent is empty).
async fn patch(
    ctx: &Ctx,
    before: Option<&berth_chunks::memory::SnapshotFile>,
    after: Option<&berth_chunks::memory::SnapshotFile>,
    path: &str,
) -> Result<Option<String>, OpError> {
    let mut texts = Vec::new();
    for side in [before, after] {
        let text = match side {
            None => String::new(),
            Some(f) if f.size > MAX_PATCH_BYTES => return Ok(None),
            Some(f) => {
                let bytes = ctx
                    .memory
                    .history
                    .read(f)
                    .await
                    .map_err(OpError::MemoryHistory)?;
                match String::from_utf8(bytes.to_vec()) {
                    Ok(text) => text,
                    Err(_) => return Ok(None),
                }
            }
        };
        texts.push(text);
    }
    let diff = similar::TextDiff::from_lines(&texts[0], &texts[1]);
    Ok(Some(
        diff.unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string(),
    ))
}
