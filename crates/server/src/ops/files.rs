//! File calls, passed through to the box's agent after waking the box. Each call keeps
//! the box from being idle while it runs. File bytes stream both ways: the daemon holds
//! a few buffers of a file, never the file.

use std::future::Future;

use berth_protocol::guest::{BoxUser, FileEntry, FileList, FileMove, FileQuery, WriteMode};
use berth_protocol::BoxId;
use berth_runtime::guest_client::{BodyError, FileDownload, GuestClient, GuestError};
use bytes::Bytes;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::lifecycle::ActivityGuard;
use crate::validate;

/// Which file, as whom, and the call's options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileTarget {
    pub path: String,
    pub user: BoxUser,
    pub recursive: bool,
    pub mode: Option<u32>,
}

impl FileTarget {
    pub(crate) fn query(&self) -> Result<FileQuery, OpError> {
        validate::box_path(&self.path)?;
        Ok(FileQuery {
            path: self.path.clone(),
            user: self.user,
            recursive: self.recursive,
            mode: self.mode,
        })
    }
}

/// A file being read out of a box. The box counts as busy until it is dropped.
pub struct FileRead {
    pub download: FileDownload,
    pub busy: ActivityGuard,
}

/// Makes one file call against the box's agent with the query `q`: the box is woken first,
/// and a call that found the box's processes dead is made once more on a new boot.
pub(crate) async fn guest_call<T, F, Fut>(
    ctx: &Ctx,
    id: &BoxId,
    q: FileQuery,
    call: F,
) -> Result<T, OpError>
where
    F: Fn(GuestClient, FileQuery) -> Fut,
    Fut: Future<Output = Result<T, GuestError>>,
{
    ctx.lifecycle().with_guest(id, |c| call(c, q.clone())).await
}

/// A [`guest_call`] for `target` that keeps the box busy: from before the wake until the
/// returned guard is dropped, so an answer that streams (a download) holds it as long.
pub(crate) async fn busy_call<T, F, Fut>(
    ctx: &Ctx,
    id: &BoxId,
    target: &FileTarget,
    call: F,
) -> Result<(T, ActivityGuard), OpError>
where
    F: Fn(GuestClient, FileQuery) -> Fut,
    Fut: Future<Output = Result<T, GuestError>>,
{
    let q = target.query()?;
    let busy = ctx.activity.begin(id);
    let answer = guest_call(ctx, id, q, call).await?;
    Ok((answer, busy))
}

pub async fn read(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileRead, OpError> {
    let (download, busy) = busy_call(
        ctx,
        id,
        target,
        |c, q| async move { c.download_file(&q).await },
    )
    .await?;
    Ok(FileRead { download, busy })
}

/// Streams `body` into the file, as fast as the box takes it.
pub async fn write<B>(
    ctx: &Ctx,
    id: &BoxId,
    target: &FileTarget,
    mode: WriteMode,
    body: B,
) -> Result<(), OpError>
where
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BodyError>,
{
    // Only the connect is retried (a box found dead is woken again): the body can be sent
    // once.
    let (upload, _busy) = busy_call(ctx, id, target, |c, q| async move {
        c.open_upload(&q, mode).await
    })
    .await?;
    Ok(upload.send(body).await?)
}

pub async fn list(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileList, OpError> {
    let (list, _busy) = busy_call(
        ctx,
        id,
        target,
        |c, q| async move { c.list_files(&q).await },
    )
    .await?;
    Ok(list)
}

pub async fn stat(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileEntry, OpError> {
    let (entry, _busy) = busy_call(ctx, id, target, |c, q| async move { c.stat(&q).await }).await?;
    Ok(entry)
}

pub async fn mkdir(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<(), OpError> {
    let ((), _busy) = busy_call(ctx, id, target, |c, q| async move { c.mkdir(&q).await }).await?;
    Ok(())
}

/// Renames `target` to `to` within the box, as `target`'s user; answers the entry at `to`.
pub async fn move_entry(
    ctx: &Ctx,
    id: &BoxId,
    target: &FileTarget,
    to: &str,
) -> Result<FileEntry, OpError> {
    validate::box_path(to)?;
    let to = to.to_owned();
    let (entry, _busy) = busy_call(ctx, id, target, |c, q| {
        let req = FileMove {
            from: q.path,
            to: to.clone(),
            user: q.user,
        };
        async move { c.move_file(&req).await }
    })
    .await?;
    Ok(entry)
}

pub async fn remove(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<(), OpError> {
    let ((), _busy) = busy_call(ctx, id, target, |c, q| async move { c.remove(&q).await }).await?;
    Ok(())
}
