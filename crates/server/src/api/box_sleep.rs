//! `POST /v1/boxes/{ref}/pause|resume|snapshot`: moving a box along its sleep ladder by
//! hand (the reclaimer does it by idle time; `crate::lifecycle`).

use axum::extract::{Path, State};
use axum::Json;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::view::BoxView;
use crate::ctx::Ctx;
use crate::ops::{box_find, service};

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/pause", tag = "boxes", summary = "Pause a running box: every process frozen in memory", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = crate::api::view::BoxView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box is not running, or its runtime cannot pause", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn pause(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<BoxView>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let paused = ctx.lifecycle().pause(&record.id).await?;
    Ok(Json(BoxView::measured(&ctx, paused, &who).await))
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/resume", tag = "boxes", summary = "Wake a paused or snapshotted box (also with auto_resume off); a stopped one is started, answered once its services have started or after 60 s", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = crate::api::view::BoxView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 503, description = "the box could not start; it is failed with the reason", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn resume(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<BoxView>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let resumed = ctx.lifecycle().resume(&record.id).await?;
    service::wait_started(&ctx, &resumed, service::START_WAIT).await;
    Ok(Json(BoxView::measured(&ctx, resumed, &who).await))
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/snapshot", tag = "boxes", summary = "Save a running or paused box's memory to disk and free it", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = crate::api::view::BoxView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box is not running or paused, or its runtime cannot snapshot (the message says why)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn snapshot(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<BoxView>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let saved = ctx.lifecycle().snapshot(&record.id).await?;
    Ok(Json(BoxView::measured(&ctx, saved, &who).await))
}
