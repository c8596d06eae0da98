//! The unary calls: `Stat`, `MakeDir`, `Move`, `ListDir`, `Remove`, each on berth's own file
//! operations (`ops::files`), as the caller's box user.

use berth_e2b_wire::filesystem::{
    EntryInfo, ListDirRequest, ListDirResponse, MakeDirRequest, MakeDirResponse, MoveRequest,
    MoveResponse, RemoveRequest, RemoveResponse, StatRequest, StatResponse,
};
use berth_e2b_wire::{Code, ConnectError};
use berth_protocol::guest::{FileEntry, FileKind};
use berth_protocol::ErrorCode;

use super::entry::entry_info;
use super::paths::{parent, resolve};
use crate::ctx::Ctx;
use crate::e2b::envd::caller::EnvdCaller;
use crate::e2b::envd::error::connect_error;
use crate::error::OpError;
use crate::ops::files::{self, FileTarget};

/// The most entries one `ListDir` answers: a deep listing of a big tree is refused with a
/// `resource_exhausted` that says so, rather than held whole in the daemon's memory.
pub const MAX_LIST_ENTRIES: usize = 10_000;

fn target(caller: &EnvdCaller, path: &str, recursive: bool) -> FileTarget {
    FileTarget {
        path: path.to_owned(),
        user: caller.user,
        recursive,
        mode: None,
    }
}

/// Whether berth's error is "no such file or directory".
fn not_found(error: &OpError) -> bool {
    matches!(error, OpError::Guest(guest) if guest.code() == ErrorCode::NotFound)
}

async fn stat_at(ctx: &Ctx, caller: &EnvdCaller, path: &str) -> Result<FileEntry, OpError> {
    let id = &caller.sandbox.box_id;
    files::stat(ctx, id, &target(caller, path, false)).await
}

pub async fn stat(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: StatRequest,
) -> Result<StatResponse, ConnectError> {
    let path = resolve(&req.path, caller.user)?;
    let entry = stat_at(ctx, caller, &path).await.map_err(connect_error)?;
    Ok(StatResponse {
        entry: Some(entry_info(&entry, path)),
    })
}

/// envd's: the directory and its missing parents; `already_exists` when it is there (the
/// SDK's `make_dir` then answers `False`), `invalid_argument` when a file is.
pub async fn make_dir(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: MakeDirRequest,
) -> Result<MakeDirResponse, ConnectError> {
    let path = resolve(&req.path, caller.user)?;
    match stat_at(ctx, caller, &path).await {
        Ok(entry) if entry.kind == FileKind::Dir => {
            return Err(ConnectError::new(
                Code::AlreadyExists,
                format!("directory already exists: {path}"),
            ))
        }
        Ok(_) => {
            return Err(ConnectError::new(
                Code::InvalidArgument,
                format!("path already exists but it is not a directory: {path}"),
            ))
        }
        Err(error) if not_found(&error) => {}
        Err(error) => return Err(connect_error(error)),
    }
    let id = &caller.sandbox.box_id;
    files::mkdir(ctx, id, &target(caller, &path, true))
        .await
        .map_err(connect_error)?;
    let entry = stat_at(ctx, caller, &path).await.map_err(connect_error)?;
    Ok(MakeDirResponse {
        entry: Some(entry_info(&entry, path)),
    })
}

/// A rename; the destination's missing parents are made first, as envd does.
pub async fn move_entry(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: MoveRequest,
) -> Result<MoveResponse, ConnectError> {
    let from = resolve(&req.source, caller.user)?;
    let to = resolve(&req.destination, caller.user)?;
    let id = &caller.sandbox.box_id;
    files::mkdir(ctx, id, &target(caller, &parent(&to), true))
        .await
        .map_err(connect_error)?;
    let entry = files::move_entry(ctx, id, &target(caller, &from, false), &to)
        .await
        .map_err(connect_error)?;
    Ok(MoveResponse {
        entry: Some(entry_info(&entry, to)),
    })
}

/// envd's `RemoveAll`: a directory with what is in it; a path that is not there is no error.
pub async fn remove(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: RemoveRequest,
) -> Result<RemoveResponse, ConnectError> {
    let path = resolve(&req.path, caller.user)?;
    let id = &caller.sandbox.box_id;
    match files::remove(ctx, id, &target(caller, &path, true)).await {
        Ok(()) => Ok(RemoveResponse {}),
        Err(error) if not_found(&error) => Ok(RemoveResponse {}),
        Err(error) => Err(connect_error(error)),
    }
}

/// The directory's entries to `depth` levels (0 is 1: the entries themselves), in the order
/// of a depth-first walk with each directory's entries by name, as envd's `WalkDir`.
/// Symlinks to directories are listed, not entered. At most [`MAX_LIST_ENTRIES`]: the
/// walk stops, and the call fails saying so, as soon as it has listed more.
pub async fn list_dir(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: ListDirRequest,
) -> Result<ListDirResponse, ConnectError> {
    let depth = req.depth.max(1) as usize;
    let root = resolve(&req.path, caller.user)?;
    let mut entries: Vec<EntryInfo> = Vec::new();
    let mut listed = 0usize;
    // One frame per directory being walked: its path and its entries not yet visited.
    let mut frames = vec![(root.clone(), list_one(ctx, caller, &root).await?)];
    listed += frames[0].1.len();
    while let Some((dir, pending)) = frames.last_mut() {
        if listed > MAX_LIST_ENTRIES {
            return Err(too_many(&root, depth));
        }
        let Some(entry) = pending.next() else {
            frames.pop();
            continue;
        };
        let path = format!("{}/{}", dir.trim_end_matches('/'), entry.name);
        entries.push(entry_info(&entry, path.clone()));
        if entry.kind == FileKind::Dir && frames.len() < depth {
            let children = list_one(ctx, caller, &path).await?;
            listed += children.len();
            frames.push((path, children));
        }
    }
    Ok(ListDirResponse { entries })
}

async fn list_one(
    ctx: &Ctx,
    caller: &EnvdCaller,
    dir: &str,
) -> Result<std::vec::IntoIter<FileEntry>, ConnectError> {
    let id = &caller.sandbox.box_id;
    let listed = files::list(ctx, id, &target(caller, dir, false))
        .await
        .map_err(connect_error)?;
    Ok(listed.entries.into_iter())
}

fn too_many(root: &str, depth: usize) -> ConnectError {
    ConnectError::new(
        Code::ResourceExhausted,
        format!(
            "{root} has more than {MAX_LIST_ENTRIES} entries to depth {depth}: list a smaller \
             depth or a subdirectory"
        ),
    )
}
