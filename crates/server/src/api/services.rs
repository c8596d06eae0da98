//! `/v1/boxes/{ref}/services…`: the daemons a box's template declares, supervised by its
//! `berth-init`: list them (without waking the box), read one's log from an offset, restart
//! one (waking the box).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_protocol::service::{ServiceInfo, ServiceList};
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::exec::NDJSON;
use crate::api::extract::ApiQuery;
use crate::api::processes::frames;
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::service;

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/services", tag = "services", summary = "The box's services, in its template's order (does not wake it: a box that is not running lists its template's, each `stopped`)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = ServiceList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the running box's agent predates services (`conflict`): stop and start the box to update it", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<ServiceList>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(service::list(&ctx, &record).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogParams {
    #[serde(default)]
    offset: u64,
    #[serde(default)]
    follow: bool,
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/services/{name}/logs", tag = "services", summary = "A service's stdout and stderr from an offset (NDJSON `ProcessFrame`s of type `output`), across its restarts", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("name" = String, Path, description = "the service, as its template names it"), ("offset" = Option<u64>, Query, description = "resume here: the log bytes already received (default 0)"), ("follow" = Option<bool>, Query, description = "keep the stream open for what the service writes next, until the box stops (default false: end at the log's end)")), responses((status = 200, description = "`output` frames (each with its offset; a jump shows log no longer kept: the box keeps the last 256 KiB of each service's)", content_type = "application/x-ndjson", body = berth_protocol::process::ProcessFrame), (status = 404, description = "no such box or service", body = berth_protocol::ErrorBody), (status = 409, description = "the box is not running, so it has no services' logs (they begin at its next start), or its agent predates services (`conflict`)", body = berth_protocol::ErrorBody), (status = 429, description = "the tenant holds `[server] max_streams_per_tenant` streams already (`too_many_requests`); retry after `Retry-After` seconds", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn logs(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, name)): Path<(String, String)>,
    ApiQuery(params): ApiQuery<LogParams>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let slot = ctx.streams.take(&who.tenant_id)?;
    let stream = service::logs(&ctx, &record, &name, params.offset, params.follow).await?;
    Ok((
        [(http::header::CONTENT_TYPE, NDJSON)],
        Body::from_stream(slot.holding(frames(stream))),
    )
        .into_response())
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/services/{name}/restart", tag = "services", summary = "Restart a service (waking the box): its running life is stopped and another started at once", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("name" = String, Path, description = "the service, as its template names it")), responses((status = 200, description = "the service just after the restart", body = ServiceInfo), (status = 404, description = "no such box or service (a box that is not running is not woken for a name its template does not declare)", body = berth_protocol::ErrorBody), (status = 409, description = "the box's agent predates services (`conflict`): stop and start the box to update it", body = berth_protocol::ErrorBody), (status = 503, description = "the box could not be started", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn restart(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, name)): Path<(String, String)>,
) -> Result<Json<ServiceInfo>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(service::restart(&ctx, &record, &name).await?))
}
