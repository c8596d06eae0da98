//! `/v1/boxes/{ref}/desktop…`: computer use on a box with a desktop (docs/desktop.md): its
//! status, a screenshot, actions (pointer, keyboard, waits) run in order, the pointer.
//! Each call wakes the box and runs collected execs in it (one of the tenant's
//! `collected_execs` slots for its length).

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, ApiQuery};
use crate::ctx::Ctx;
use crate::desktop::action::Action;
use crate::desktop::{ActionsDone, Cursor, DesktopStatus};
use crate::ops::{box_find, desktop};

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/desktop", tag = "desktop", summary = "The box's desktop: its display and screen size, once its services have settled (wakes the box; waits up to 300 s)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = DesktopStatus), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box has no desktop (its template has no `xvfb` service), its `xvfb` failed or exited, or it stopped meanwhile (`conflict`)", body = berth_protocol::ErrorBody), (status = 429, description = "too many collected execs at once for the tenant or the daemon (`too_many_requests`); retry after `Retry-After` seconds", body = berth_protocol::ErrorBody), (status = 504, description = "the box's services did not settle within 300 s (`timeout`)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn status(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<DesktopStatus>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let _slot = ctx.collected_execs.take(&who.tenant_id)?;
    Ok(Json(desktop::status(&ctx, &record).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScreenshotParams {
    #[serde(default)]
    cursor: bool,
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/desktop/screenshot", tag = "desktop", summary = "A PNG of the box's whole screen (wakes the box)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("cursor" = Option<bool>, Query, description = "draw the mouse pointer into the picture (default false)")), responses((status = 200, description = "the PNG", content_type = "image/png", body = Vec<u8>), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box has no desktop or it is down (`conflict`), or `scrot` failed in it (`details`: `exit_code`, `stderr`)", body = berth_protocol::ErrorBody), (status = 413, description = "the PNG is over 32 MiB (`payload_too_large`)", body = berth_protocol::ErrorBody), (status = 429, description = "too many collected execs at once (`too_many_requests`)", body = berth_protocol::ErrorBody), (status = 504, description = "the box's services did not settle within 300 s, or `scrot` timed out (`timeout`)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn screenshot(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<ScreenshotParams>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let _slot = ctx.collected_execs.take(&who.tenant_id)?;
    let png = desktop::screenshot(&ctx, &record, params.cursor).await?;
    Ok(([(http::header::CONTENT_TYPE, "image/png")], png).into_response())
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = DesktopActions)]
pub struct ActionsBody {
    /// At most 100, run in order.
    actions: Vec<Action>,
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/desktop/actions", tag = "desktop", summary = "Run pointer and keyboard actions on the box's desktop, in order (wakes the box); answers where the pointer is after the last", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), request_body = ActionsBody, responses((status = 200, body = ActionsDone), (status = 400, description = "invalid request: over 100 actions, an unknown field or type, a coordinate past 32767, a key name with other characters than letters, digits, `_`, `-`, `+` and spaces, a wait over 60000 ms, … (`details`: the action's `index` and `type`): nothing was done and the box was not woken; or a key name xdotool does not know (`details`: `index`, `type`, `stderr`; the actions before it were done)", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box has no desktop or it is down (`conflict`), or an action's program failed in the box (`details`: its `index`, `type`, `exit_code`, `stderr`; the actions before it were done)", body = berth_protocol::ErrorBody), (status = 429, description = "too many collected execs at once (`too_many_requests`)", body = berth_protocol::ErrorBody), (status = 504, description = "the box's services did not settle within 300 s, or an action timed out (`timeout`)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn actions(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiJson(body): ApiJson<ActionsBody>,
) -> Result<Json<ActionsDone>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let _slot = ctx.collected_execs.take(&who.tenant_id)?;
    Ok(Json(desktop::act(&ctx, &record, &body.actions).await?))
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/desktop/cursor", tag = "desktop", summary = "Where the mouse pointer is on the box's desktop (wakes the box)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = Cursor), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box has no desktop or it is down (`conflict`)", body = berth_protocol::ErrorBody), (status = 429, description = "too many collected execs at once (`too_many_requests`)", body = berth_protocol::ErrorBody), (status = 504, description = "the box's services did not settle within 300 s (`timeout`)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn cursor(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<Cursor>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let _slot = ctx.collected_execs.take(&who.tenant_id)?;
    Ok(Json(desktop::cursor(&ctx, &record).await?))
}
