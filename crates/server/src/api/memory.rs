//! `/v1/boxes/{ref}/memory…`: a box's `/memory`, read without waking it (`ops::memory_read`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use axum::Json;
use berth_protocol::memory::MemoryTree;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiQuery;
use crate::ctx::Ctx;
use crate::ops::{box_find, memory_read};

/// Where an answer was read from: `box` (its agent) or `volume` (its image, asleep).
pub const SOURCE_HEADER: &str = "x-berth-memory-source";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeParams {
    #[serde(default)]
    path: String,
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory", tag = "memory", summary = "List a box's memory without waking it", description = "Every entry below a directory of `/memory` (all of it by default), parents before their children. A running box answers through its agent; any other is read from its volume image, and its state and events stay as they were.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = Option<String>, Query, description = "a directory below `/memory` (e.g. `entities`)")), responses((status = 200, body = MemoryTree), (status = 400, description = "invalid path, or `not_a_directory`", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or directory", body = berth_protocol::ErrorBody), (status = 409, description = "the box's volume image cannot be read (its next start checks it)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn tree(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<TreeParams>,
) -> Result<Json<MemoryTree>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(
        memory_read::tree(&ctx, &record.id, &params.path).await?,
    ))
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory/{path}", tag = "memory", summary = "Read a file of a box's memory without waking it", description = "The bytes of a regular file below `/memory` (at most 16 MiB); symlinks are never followed. `X-Berth-Memory-Source` says whether the running box (`box`) or its volume image (`volume`) answered. The top-level names `search`, `links`, `graph`, `snapshots` and `restore` are the API's own.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Path, description = "the file's path below `/memory`, its `/`s as they are (e.g. `entities/alice.md`)")), responses((status = 200, description = "the file's bytes", content_type = "application/octet-stream", body = Vec<u8>), (status = 400, description = "invalid path; `is_a_directory`, `not_a_directory` or `not_a_regular_file` (a symlink, device, FIFO or socket)", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or file", body = berth_protocol::ErrorBody), (status = 409, description = "the box's volume image cannot be read (its next start checks it)", body = berth_protocol::ErrorBody), (status = 413, description = "the file is over 16 MiB", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn file(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let (bytes, source) = memory_read::file(&ctx, &record.id, &path).await?;
    let mut response = Response::new(Body::from(bytes));
    let headers = response.headers_mut();
    headers.insert(http::header::CONTENT_TYPE, content_type(&path));
    headers.insert(
        SOURCE_HEADER,
        http::HeaderValue::from_static(match source {
            berth_protocol::memory::MemorySource::Box => "box",
            berth_protocol::memory::MemorySource::Volume => "volume",
        }),
    );
    Ok(response)
}

/// Text for the notes memory holds, bytes for anything else: never a type a browser would
/// run (the file is the box's, served from berth's own origin).
pub(super) fn content_type(path: &str) -> http::HeaderValue {
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    http::HeaderValue::from_static(match ext.as_deref() {
        Some("md" | "markdown") => "text/markdown; charset=utf-8",
        Some("txt" | "log" | "csv") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    })
}
