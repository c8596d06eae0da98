//! `/v1/boxes/{ref}/memory/snapshots…` and `…/memory/restore`: a box's memory through time
//! (`memory::history`, `memory::restore`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_protocol::memory_history::{
    MemoryDiff, MemoryRestored, MemorySnapshot, MemorySnapshotList, MemorySnapshotTree,
    RestoreRequest, SnapshotReason,
};
use http::StatusCode;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, ApiQuery};
use crate::ctx::Ctx;
use crate::memory::{history, restore};
use crate::ops::box_find;

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory/snapshots", tag = "memory", summary = "List a box's memory snapshots", description = "Oldest first. A snapshot is taken at each stop or sleep whose memory changed, on request, and before each restore; the retention policy keeps all of the last day, the newest of each day for 30 days and of each week for a year.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = MemorySnapshotList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<MemorySnapshotList>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(history::list(&ctx, &record.id).await?))
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/memory/snapshots", tag = "memory", summary = "Take a snapshot of a box's memory", description = "Now, whatever the box's state (the request has no body): a running box's agent packs `/memory`, any other box's volume image is read (its state does not change). A snapshot stores only what no earlier one holds.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 201, body = MemorySnapshot), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box, or a box never started (it has no memory yet)", body = berth_protocol::ErrorBody), (status = 409, description = "the memory cannot be read, or is over 512 MiB", body = berth_protocol::ErrorBody), (status = 413, description = "the memory is over what a snapshot takes", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn take(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let snapshot = history::take(&ctx, &record.id, SnapshotReason::Request).await?;
    Ok((StatusCode::CREATED, Json(snapshot)).into_response())
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory/snapshots/{snapshot}", tag = "memory", summary = "What a memory snapshot holds", description = "The snapshot and every directory and file in it, by path.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("snapshot" = String, Path, description = "the snapshot's id (`ms_…`)")), responses((status = 200, body = MemorySnapshotTree), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or snapshot", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn get(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, snapshot)): Path<(String, String)>,
) -> Result<Json<MemorySnapshotTree>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(history::tree(&ctx, &record.id, &snapshot).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiffParams {
    to: Option<String>,
    path: Option<String>,
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory/snapshots/{snapshot}/diff", tag = "memory", summary = "What changed in a box's memory between two snapshots", description = "The files added, removed and modified from `{snapshot}` to `to` (default: the newest). With `path`, only below it; when that leaves one file of text (≤ 1 MiB each side), its unified diff is in `patch`.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("snapshot" = String, Path, description = "the earlier snapshot's id"), ("to" = Option<String>, Query, description = "the later snapshot's id (default: the newest)"), ("path" = Option<String>, Query, description = "a file or directory below `/memory`")), responses((status = 200, body = MemoryDiff), (status = 400, description = "invalid path", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or snapshot", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn diff(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, snapshot)): Path<(String, String)>,
    ApiQuery(params): ApiQuery<DiffParams>,
) -> Result<Json<MemoryDiff>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(
        history::diff(
            &ctx,
            &record.id,
            &snapshot,
            params.to.as_deref(),
            params.path.as_deref(),
        )
        .await?,
    ))
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/memory/snapshots/{snapshot}/files/{path}", tag = "memory", summary = "Read a memory file as a snapshot holds it", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("snapshot" = String, Path, description = "the snapshot's id"), ("path" = String, Path, description = "the file's path below `/memory`")), responses((status = 200, description = "the file's bytes", content_type = "application/octet-stream", body = Vec<u8>), (status = 400, description = "invalid path", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or snapshot, or no such file in it", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn file(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, snapshot, path)): Path<(String, String, String)>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let bytes = history::read_file(&ctx, &record.id, &snapshot, &path).await?;
    let mut response = Response::new(Body::from(bytes));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        super::memory::content_type(&path),
    );
    Ok(response)
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/memory/restore", tag = "memory", summary = "Bring back a box's memory from a snapshot", description = "The whole tree (then `/memory` holds exactly what the snapshot held) or one file or directory of it. The memory as it stands is snapshotted first (`before` in the answer: restore it to undo this). The files are written by the box's agent: a sleeping box is woken.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), request_body = RestoreRequest, responses((status = 200, body = MemoryRestored), (status = 400, description = "invalid path or body", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or snapshot, or the snapshot does not hold `path`", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn restore(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiJson(request): ApiJson<RestoreRequest>,
) -> Result<Json<MemoryRestored>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(restore::restore(&ctx, &record.id, &request).await?))
}
