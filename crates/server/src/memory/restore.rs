//! `POST …/memory/restore`: a snapshot's files brought back into the box, the whole tree or
//! one path of it. The memory as it stands is snapshotted first (`before_restore`), so a
//! restore is itself undone by restoring that. The files are written through the box's
//! agent (the box is woken if it sleeps), only those that differ from what stands now (a
//! file already as it was keeps its time), and what the snapshot did not hold below the
//! restored path is removed: a restored directory holds exactly what it held then. A
//! snapshot keeps no modes: a restored file is the user's, `0644`.

use std::collections::BTreeSet;

use berth_chunks::memory::MemoryInput;
use berth_protocol::guest::BoxUser;
use berth_protocol::memory::MEMORY_ROOT;
use berth_protocol::memory_history::{MemoryRestored, RestoreRequest, SnapshotReason};
use berth_protocol::BoxId;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::memory::history;
use crate::ops::files::FileTarget;
use crate::ops::{files, files_archive, memory_read};

pub async fn restore(
    ctx: &Ctx,
    id: &BoxId,
    request: &RestoreRequest,
) -> Result<MemoryRestored, OpError> {
    let rel = memory_read::checked(request.path.as_deref().unwrap_or(""))?;
    let snapshot = history::find(ctx, id, &request.snapshot).await?;
    let files = history::files_of(ctx, &snapshot).await?;
    let under = |p: &str| rel.is_empty() || p == rel || p.starts_with(&format!("{rel}/"));
    let wanted: Vec<_> = files.iter().filter(|(p, _)| under(p)).collect();
    if wanted.is_empty() && !rel.is_empty() {
        return Err(OpError::NotInSnapshot {
            snapshot: snapshot.id,
            path: rel,
        });
    }
    let (now, _) = memory_read::export(ctx, id).await?;
    let doomed = doomed(&now, &files, &under);
    // What already stands as the snapshot holds it is left alone (its time, its mode).
    let unchanged: std::collections::HashSet<String> = now
        .iter()
        .filter_map(|input| match input {
            MemoryInput::File { path, content } => files
                .get(path)
                .filter(|f| !f.is_dir && f.hash == berth_chunks::memory::content_hash(content))
                .map(|_| path.clone()),
            MemoryInput::Dir(path) => files.get(path).filter(|f| f.is_dir).map(|_| path.clone()),
        })
        .collect();
    let before = history::record(ctx, id, now, SnapshotReason::BeforeRestore).await?;

    let mut tar = tar::Builder::new(Vec::new());
    let mut written = 0u64;
    let now_unix = time::OffsetDateTime::now_utc().unix_timestamp().max(0) as u64;
    for (path, file) in wanted.iter().filter(|(p, _)| !unchanged.contains(*p)) {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(now_unix);
        if file.is_dir {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            tar.append_data(&mut header, path, std::io::empty())
        } else {
            let content = ctx
                .memory
                .history
                .read(file)
                .await
                .map_err(OpError::MemoryHistory)?;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(0o644);
            header.set_size(content.len() as u64);
            written += 1;
            tar.append_data(&mut header, path, &content[..])
        }
        .map_err(|e| {
            OpError::MemoryHistory(berth_chunks::ChunkError::MemoryInput(format!(
                "cannot pack {path}: {e}"
            )))
        })?;
    }
    let tar = tar.into_inner().map_err(|e| {
        OpError::MemoryHistory(berth_chunks::ChunkError::MemoryInput(format!(
            "cannot pack the restore: {e}"
        )))
    })?;
    let target = |path: String, recursive: bool| FileTarget {
        path,
        user: BoxUser::User,
        recursive,
        mode: None,
    };
    // Removals first: a path the snapshot holds as a file may stand as a directory now.
    for path in &doomed {
        files::remove(ctx, id, &target(format!("{MEMORY_ROOT}/{path}"), true)).await?;
    }
    files_archive::write(
        ctx,
        id,
        &target(MEMORY_ROOT.into(), false),
        axum::body::Body::from(tar),
    )
    .await?;
    if let Ok(index) = ctx.memory.index(id) {
        index.forget_seen();
    }
    tracing::info!(box_id = %id, restored = %snapshot.id, before = %before.id, files = written, removed = doomed.len(), "memory restored");
    Ok(MemoryRestored {
        restored: snapshot.id,
        before,
        files: written,
        removed: doomed.len() as u64,
    })
}

/// What stands now below the restored path that the snapshot does not hold, outermost
/// only (removing a directory removes what is in it). A path whose kind differs (a file
/// then, a directory now) is removed too.
fn doomed(
    now: &[MemoryInput],
    then: &berth_chunks::memory::SnapshotFiles,
    under: &dyn Fn(&str) -> bool,
) -> Vec<String> {
    let mut doomed = BTreeSet::new();
    for input in now {
        let path = input.path();
        if !under(path) {
            continue;
        }
        let is_dir = matches!(input, MemoryInput::Dir(_));
        let keep = then.get(path).is_some_and(|f| f.is_dir == is_dir);
        let inside_doomed = doomed
            .iter()
            .any(|d: &String| path.starts_with(&format!("{d}/")));
        if !keep && !inside_doomed {
            doomed.insert(path.to_owned());
        }
    }
    doomed.into_iter().collect()
}
