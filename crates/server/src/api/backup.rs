//! `GET /v1/boxes/{ref}/backup`: a box as one file, streamed; `POST /v1/backups/restore`:
//! such a file made into a new box (`crate::backup`).

use std::io::{self, Write};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::{Bytes, BytesMut};
use futures_util::TryStreamExt as _;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiQuery;
use crate::api::view::BoxView;
use crate::backup::restore::RestoreAs;
use crate::backup::BackupError;
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::tenant_choice::{self, TenantChoiceError};

pub const ZSTD: &str = "application/zstd";
/// Chunks of the archive in flight to the client at most (each up to [`CHUNK`]).
const IN_FLIGHT: usize = 8;
const CHUNK: usize = 256 * 1024;

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/backup", tag = "boxes", summary = "Back a box up as one file", description = "A zstd-compressed tar of the box's volume (its holes left out), its memory history and its settings, with a manifest of every entry's sha256; `POST /v1/backups/restore` makes a new box of it. Consistent: a running box's volume is frozen (or the box paused) while it is staged, milliseconds to seconds, then streamed with nothing held; the box's state does not change. An error after the first byte cuts the stream, so a partial file never looks whole.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, description = "the archive, streamed", content_type = "application/zstd", body = Vec<u8>), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box's runtime can neither freeze nor pause it: stop it first", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn backup(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    let task = crate::backup::start(&ctx, &record.id, ChannelWriter::new(tx.clone())).await?;
    let box_id = record.id.clone();
    tokio::spawn(async move {
        let failed = match task.await {
            Ok(Ok(_)) | Ok(Err(BackupError::ClientGone)) => return,
            Ok(Err(e)) => berth_runtime::error_chain(&e),
            Err(e) => e.to_string(),
        };
        tracing::warn!(box_id = %box_id, error = %failed, "backup failed while it streamed; the client gets a cut stream");
        let _ = tx.send(Err(io::Error::other(failed))).await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((chunk, rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ZSTD),
    );
    let disposition = format!(
        "attachment; filename=\"{}\"",
        crate::backup::file_name(&record)
    );
    if let Ok(value) = http::HeaderValue::from_str(&disposition) {
        headers.insert(http::header::CONTENT_DISPOSITION, value);
    }
    Ok(response)
}

/// A blocking writer whose bytes go out as the response's chunks: it waits while the
/// client is [`IN_FLIGHT`] chunks behind, so the daemon holds a few chunks, never the file.
struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes, io::Error>>,
    buf: BytesMut,
}

impl ChannelWriter {
    fn new(tx: mpsc::Sender<Result<Bytes, io::Error>>) -> ChannelWriter {
        ChannelWriter {
            tx,
            buf: BytesMut::with_capacity(CHUNK),
        }
    }

    fn send(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == CHUNK {
            self.send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send()
    }
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct RestoreParams {
    /// The new box's name; absent: the backed-up box's.
    #[serde(default)]
    name: Option<String>,
    /// Admin only: the tenant (name or `tn_…`) the box is restored into. Default: the key's.
    #[serde(default)]
    tenant: Option<String>,
    /// The runtime the new box runs on; absent: the backed-up box's.
    #[serde(default)]
    runtime: Option<String>,
    /// The template the new box is made from; absent: the backed-up box's.
    #[serde(default)]
    template: Option<String>,
}

/// What a restore made.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RestoredBackup {
    #[serde(rename = "box")]
    pub restored: BoxView,
    /// The box the backup was taken of.
    pub from: BackupOrigin,
    /// The bytes of volume data restored.
    pub volume_bytes: u64,
    /// The memory snapshots restored with it.
    pub memory_snapshots: u64,
    /// What of the backed-up box could not be kept (a sleep rung the runtime cannot do).
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct BackupOrigin {
    pub box_id: String,
    pub name: String,
    pub tenant: String,
    /// When the backup was taken (RFC 3339).
    pub created_at: String,
    pub berth_version: String,
}

#[utoipa::path(post, path = "/v1/backups/restore", tag = "boxes", summary = "Make a new box of a backup", description = "The body is a file from `GET /v1/boxes/{box_ref}/backup` (or a scheduled backup). It is read and checked whole before anything is made: an archive that is damaged, cut short, changed, or holds any name a backup does not (`../x` included) is refused with 400 and the reason, and nothing is created. The new box has a new id, the backed-up box's settings (less a sleep rung the runtime cannot do, said in `notes`), its volume byte for byte and its memory history; it is `stopped`, and its first start checks the volume in full. On an API replica: 409.", params(RestoreParams), request_body(content = Vec<u8>, content_type = "application/zstd"), responses((status = 201, body = RestoredBackup), (status = 400, description = "not a whole, unchanged berth backup; or invalid settings", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 403, description = "another tenant, without an admin key", body = berth_protocol::ErrorBody), (status = 404, description = "no such tenant", body = berth_protocol::ErrorBody), (status = 409, description = "a box of that name exists (pass `name`), or an API replica", body = berth_protocol::ErrorBody), (status = 413, description = "larger than this host takes", body = berth_protocol::ErrorBody), (status = 429, description = "too many uploads at once; retry after `Retry-After` seconds", body = berth_protocol::ErrorBody), (status = 507, description = "the data dir's disk has no room for it", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn restore(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    ApiQuery(params): ApiQuery<RestoreParams>,
    body: Body,
) -> Result<Response, ApiError> {
    let tenant =
        tenant_choice::chosen(&ctx, &who, params.tenant.as_deref()).map_err(|e| match e {
            TenantChoiceError::OtherTenant => ApiError::AdminRequired,
            TenantChoiceError::Op(e) => e.into(),
        })?;
    // Taken before a byte of the body is read (so before `100 Continue`).
    let _slot = ctx.uploads.take(&tenant)?;
    let to = RestoreAs {
        name: params.name,
        runtime: params.runtime,
        template: params.template,
    };
    let body = body.into_data_stream().map_err(io::Error::other);
    let restored = crate::backup::restore::restore(&ctx, &tenant, to, body).await?;
    let header = restored.header;
    let view = RestoredBackup {
        restored: BoxView::measured(&ctx, restored.record, &who).await,
        from: BackupOrigin {
            box_id: header.box_id,
            name: header.box_name,
            tenant: header.tenant,
            created_at: header.created_at,
            berth_version: header.berth_version,
        },
        volume_bytes: header.volume_bytes,
        memory_snapshots: restored.snapshots,
        notes: restored.notes,
    };
    Ok((StatusCode::CREATED, Json(view)).into_response())
}
