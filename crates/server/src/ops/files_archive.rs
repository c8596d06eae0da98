//! Whole directories in and out of a box as tar streams. Each call keeps the box from
//! being idle while it runs; the tar streams both ways, so the daemon holds a few chunks,
//! never the tree.

use berth_protocol::files::ArchiveWritten;
use berth_protocol::BoxId;
use berth_runtime::guest_client::BodyError;
use bytes::Bytes;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::files::{busy_call, FileRead, FileTarget};

/// A tar being read out of a box (a [`FileRead`] with no length). The box counts as busy
/// until it is dropped.
pub async fn read(ctx: &Ctx, id: &BoxId, target: &FileTarget) -> Result<FileRead, OpError> {
    let (download, busy) = busy_call(ctx, id, target, |c, q| async move {
        c.download_archive(&q).await
    })
    .await?;
    Ok(FileRead { download, busy })
}

/// Streams the tar in `body` into the box, extracted under the target directory, as fast
/// as the box takes it.
pub async fn write<B>(
    ctx: &Ctx,
    id: &BoxId,
    target: &FileTarget,
    body: B,
) -> Result<ArchiveWritten, OpError>
where
    B: axum::body::HttpBody<Data = Bytes> + Send + 'static,
    B::Error: Into<BodyError>,
{
    // Only the connect is retried (a box found dead is woken again): the body can be sent
    // once.
    let (upload, _busy) = busy_call(ctx, id, target, |c, q| async move {
        c.open_archive_upload(&q).await
    })
    .await?;
    Ok(upload.send(body).await?)
}
