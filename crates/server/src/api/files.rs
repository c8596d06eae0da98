//! `/v1/boxes/{ref}/files…`: read, write, list, stat, mkdir, remove.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use berth_protocol::guest::{BoxUser, FileEntry, FileList, WriteMode};
use http::StatusCode;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::{ApiQuery, Upload};
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::files::{self, FileRead, FileTarget};
use berth_runtime::error_chain;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileParams {
    path: String,
    #[serde(default)]
    user: BoxUser,
    #[serde(default)]
    recursive: bool,
    #[serde(default)]
    mode: Option<u32>,
}

impl From<FileParams> for FileTarget {
    fn from(p: FileParams) -> Self {
        FileTarget {
            path: p.path,
            user: p.user,
            recursive: p.recursive,
            mode: p.mode,
        }
    }
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/files", tag = "files", summary = "Read a file", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`")), responses((status = 200, description = "the bytes, streamed; `Content-Length` is the size the file had when the box opened it (a file that grows is cut there)", content_type = "application/octet-stream", body = Vec<u8>), (status = 400, description = "invalid request; `not_a_regular_file` for a FIFO, device or socket (or a symlink to one)", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn read(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let read = files::read(&ctx, &record.id, &params.into()).await?;
    let read_len = read.download.size_bytes();
    let mut response = Response::new(Body::from_stream(chunks(read)));
    let headers = response.headers_mut();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/octet-stream"),
    );
    if let Some(len) = read_len {
        headers.insert(http::header::CONTENT_LENGTH, len.into());
    }
    Ok(response)
}

/// The file's (or tar's) bytes as the box sends them. A failure mid-stream (the box went
/// away, or sent more than it announced) ends the body with an error, which cuts the
/// connection: the client sees a short body, never a file that looks whole.
pub(crate) fn chunks(
    read: FileRead,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> + Send {
    futures_util::stream::unfold(Some(read), |state| async move {
        let mut read = state?;
        match read.download.next_chunk().await {
            Ok(Some(chunk)) => Some((Ok(chunk), Some(read))),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "file read from the box broke");
                Some((Err(std::io::Error::other(e)), None))
            }
        }
    })
}

#[utoipa::path(put, path = "/v1/boxes/{box_ref}/files", tag = "files", summary = "Write a file atomically (at most 256 MiB)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`"), ("mode" = Option<u32>, Query, description = "permission bits of a new file")), request_body(content = Vec<u8>, content_type = "application/octet-stream"), responses((status = 204, description = "written"), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 413, description = "over 256 MiB", body = berth_protocol::ErrorBody), (status = 429, description = "too many uploads at once, for the tenant or the daemon (`too_many_requests`); retry after `Retry-After` seconds", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn write(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
    upload: Upload,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    // Taken before a byte of the body is read (so before `100 Continue`).
    let _slot = ctx.uploads.take(&who.tenant_id)?;
    files::write(
        &ctx,
        &record.id,
        &params.into(),
        WriteMode::Atomic,
        upload.body,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/files/list", tag = "files", summary = "List a directory", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`")), responses((status = 200, body = berth_protocol::guest::FileList), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<Json<FileList>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(files::list(&ctx, &record.id, &params.into()).await?))
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/files/stat", tag = "files", summary = "Describe a path (without following a final symlink)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`")), responses((status = 200, body = berth_protocol::guest::FileEntry), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn stat(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<Json<FileEntry>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(files::stat(&ctx, &record.id, &params.into()).await?))
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/files/mkdir", tag = "files", summary = "Make a directory", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`"), ("recursive" = Option<bool>, Query, description = "make missing parents")), responses((status = 204, description = "made"), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn mkdir(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    files::mkdir(&ctx, &record.id, &params.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(delete, path = "/v1/boxes/{box_ref}/files", tag = "files", summary = "Remove a file or directory", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`"), ("recursive" = Option<bool>, Query, description = "remove a directory tree")), responses((status = 204, description = "removed"), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn remove(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<FileParams>,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    files::remove(&ctx, &record.id, &params.into()).await?;
    Ok(StatusCode::NO_CONTENT)
}
