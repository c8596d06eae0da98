//! `/v1/boxes/{ref}/files/archive`: a directory out of the box as a tar stream (`GET`),
//! and a tar stream extracted into one (`PUT`). Neither is ever held whole by the daemon.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use berth_protocol::files::ArchiveWritten;
use berth_protocol::guest::BoxUser;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiQuery;
use crate::api::files;
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::files::FileTarget;
use crate::ops::files_archive;

pub const TAR: &str = "application/x-tar";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveParams {
    path: String,
    #[serde(default)]
    user: BoxUser,
}

impl From<ArchiveParams> for FileTarget {
    fn from(p: ArchiveParams) -> Self {
        FileTarget {
            path: p.path,
            user: p.user,
            recursive: false,
            mode: None,
        }
    }
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/files/archive", tag = "files", summary = "Read a directory (or one file) as a tar stream", description = "Entry names are relative to `path` (its contents, no `./` prefix); a `path` naming one file gives one entry named by the file's name. Regular files (mode, mtime), directories and symlinks (stored as links, never followed); sockets, FIFOs and devices are left out. Read as `user`: a file that user cannot read cuts the stream (the connection closes before the tar's end), so a partial tar never looks whole.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`")), responses((status = 200, description = "the tar, streamed", content_type = "application/x-tar", body = Vec<u8>), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box, or no such path", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn read(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<ArchiveParams>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let read = files_archive::read(&ctx, &record.id, &params.into()).await?;
    let mut response = Response::new(Body::from_stream(files::chunks(read)));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(TAR),
    );
    Ok(response)
}

#[utoipa::path(put, path = "/v1/boxes/{box_ref}/files/archive", tag = "files", summary = "Extract a tar stream into a directory", description = "`path` is made (with parents) if missing. Extracted as `user`, who owns what is written; the box user's files lose setuid/setgid bits. Refused with 400 `invalid_request` naming the entry: absolute names, any `..`, symlinks whose target leaves `path`, hard links to outside it, and any path through a symlink (in the archive or already in the box); entries before the refused one stay. Devices and FIFOs are skipped. No size limit: the box's disk bounds it.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path of the target directory in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`")), request_body(content = Vec<u8>, content_type = "application/x-tar"), responses((status = 200, description = "extracted", body = berth_protocol::files::ArchiveWritten), (status = 400, description = "invalid request, not a tar, or an entry refused", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 429, description = "too many uploads at once, for the tenant or the daemon (`too_many_requests`); retry after `Retry-After` seconds", body = berth_protocol::ErrorBody), (status = 507, description = "the box's disk is full", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn write(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<ArchiveParams>,
    body: Body,
) -> Result<Json<ArchiveWritten>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    // Taken before a byte of the body is read (so before `100 Continue`).
    let _slot = ctx.uploads.take(&who.tenant_id)?;
    Ok(Json(
        files_archive::write(&ctx, &record.id, &params.into(), body).await?,
    ))
}
