//! File calls, passed through to the box's agent after waking the box. Each call keeps
//! the box from being idle while it runs. File bytes stream both ways: the daemon holds
//! a few buffers of a file, never the file.

use berth_protocol::guest::{BoxUser, FileEntry, FileList, FileQuery};
use berth_protocol::BoxId;
use berth_runtime::guest_client::{BodyError, FileDownload};
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

pub async fn read(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileRead, OpError> {
    let q = target.query()?;
    let busy = ctx.activity.begin(id);
    let download = ctx
        .lifecycle()
        .with_guest(id, |c| {
            let q = q.clone();
            async move { c.download_file(&q).await }
        })
        .await?;
    Ok(FileRead { download, busy })
}

/// Streams `body` into the file, as fast as the box takes it.
pub async fn write<B>(ctx: &Ctx, id: &BoxId, target: &FileTarget, body: B) -> Result<(), OpError>
where
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BodyError>,
{
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    // Only the connect is retried (a box found dead is woken again): the body can be sent
    // once.
    let upload = ctx
        .lifecycle()
        .with_guest(id, |c| {
            let q = q.clone();
            async move { c.open_upload(&q).await }
        })
        .await?;
    Ok(upload.send(body).await?)
}

pub async fn list(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileList, OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    ctx.lifecycle()
        .with_guest(id, |c| {
            let q = q.clone();
            async move { c.list_files(&q).await }
        })
        .await
}

pub async fn stat(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileEntry, OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    ctx.lifecycle()
        .with_guest(id, |c| {
            let q = q.clone();
            async move { c.stat(&q).await }
        })
        .await
}

pub async fn mkdir(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<(), OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    ctx.lifecycle()
        .with_guest(id, |c| {
            let q = q.clone();
            async move { c.mkdir(&q).await }
        })
        .await
}

pub async fn remove(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<(), OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    ctx.lifecycle()
        .with_guest(id, |c| {
            let q = q.clone();
            async move { c.remove(&q).await }
        })
        .await
}
