//! File calls, passed through to the box's agent after waking the box. Each call keeps
//! the box from being idle while it runs.

use berth_protocol::guest::{BoxUser, FileEntry, FileList, FileQuery};
use berth_protocol::BoxId;
use bytes::Bytes;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_start::with_guest;
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
    fn query(&self) -> Result<FileQuery, OpError> {
        validate::box_path(&self.path)?;
        Ok(FileQuery {
            path: self.path.clone(),
            user: self.user,
            recursive: self.recursive,
            mode: self.mode,
        })
    }
}

pub async fn read(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<Bytes, OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    with_guest(ctx, id, |c| {
        let q = q.clone();
        async move { c.read_file(&q).await }
    })
    .await
}

pub async fn write(ctx: &Ctx, id: &BoxId, target: &FileTarget, data: Bytes) -> Result<(), OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    with_guest(ctx, id, |c| {
        let (q, data) = (q.clone(), data.clone());
        async move { c.write_file(&q, data).await }
    })
    .await
}

pub async fn list(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileList, OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    with_guest(ctx, id, |c| {
        let q = q.clone();
        async move { c.list_files(&q).await }
    })
    .await
}

pub async fn stat(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileEntry, OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    with_guest(ctx, id, |c| {
        let q = q.clone();
        async move { c.stat(&q).await }
    })
    .await
}

pub async fn mkdir(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<(), OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    with_guest(ctx, id, |c| {
        let q = q.clone();
        async move { c.mkdir(&q).await }
    })
    .await
}

pub async fn remove(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<(), OpError> {
    let q = target.query()?;
    let _busy = ctx.activity.begin(id);
    with_guest(ctx, id, |c| {
        let q = q.clone();
        async move { c.remove(&q).await }
    })
    .await
}
