//! Scheduled wakeups of a box: `POST/GET /v1/boxes/{ref}/wakeups`,
//! `DELETE /v1/boxes/{ref}/wakeups/{id}`.

use axum::extract::{Path, State};
use axum::Json;
use berth_protocol::wake::WakeSchedule;

use http::StatusCode;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::ctx::Ctx;
use crate::ops::wakeups::{self, view, WakeupList, WakeupView};

/// Exactly one of `at`, `in_s`, `cron`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateWakeup)]
pub struct CreateBody {
    /// RFC 3339 time of the one slot, e.g. `2026-12-02T09:00:00+01:00`.
    #[serde(default)]
    at: Option<String>,
    /// Seconds from now to the one slot.
    #[serde(default)]
    in_s: Option<u64>,
    /// 5-field cron expression (minute hour day-of-month month day-of-week): a slot at
    /// each match.
    #[serde(default)]
    cron: Option<String>,
    /// IANA time zone `cron` is read in (default `UTC`).
    #[serde(default)]
    tz: Option<String>,
    /// The message posted to the box at each slot (1 byte to 256 KiB).
    message: String,
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/wakeups", tag = "messages", summary = "Schedule a message to the box: once (`at`, `in_s`) or by `cron`", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), request_body = CreateBody, responses((status = 201, body = WakeupView), (status = 400, description = "invalid schedule or message, or the box takes no messages", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box has `[wakeups] max_pending_per_box` pending", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn create(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<(StatusCode, Json<WakeupView>), ApiError> {
    let schedule = WakeSchedule {
        at: body.at,
        in_s: body.in_s,
        cron: body.cron,
        tz: body.tz,
    };
    let made = wakeups::create(&ctx, &who.tenant_id, &reference, &schedule, &body.message)?;
    Ok((StatusCode::CREATED, Json(view(&made))))
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/wakeups", tag = "messages", summary = "List the box's pending wakeups, soonest first", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = WakeupList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<WakeupList>, ApiError> {
    let all = wakeups::list(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(WakeupList {
        wakeups: all.iter().map(view).collect(),
    }))
}

#[utoipa::path(delete, path = "/v1/boxes/{box_ref}/wakeups/{wakeup_id}", tag = "messages", summary = "Cancel a wakeup (every slot not yet fired)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("wakeup_id" = String, Path, description = "`wk_…`")), responses((status = 200, body = WakeupView), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or wakeup", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn delete(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, id)): Path<(String, String)>,
) -> Result<Json<WakeupView>, ApiError> {
    let gone = wakeups::delete(&ctx, &who.tenant_id, &reference, &id)?;
    Ok(Json(view(&gone)))
}
