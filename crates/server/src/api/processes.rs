//! `/v1/boxes/{ref}/processes…`: the box's background processes (started with `POST …/exec`
//! and `"background": true`): list them, follow one's output from an offset, stream bytes
//! to its stdin, signal it.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_protocol::process::{ProcessFrame, ProcessList};
use berth_runtime::ProcessOutput;
use bytes::Bytes;
use http::StatusCode;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::exec::NDJSON;
use crate::api::extract::{ApiJson, ApiQuery};
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::process;
use berth_runtime::error_chain;

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/processes", tag = "processes", summary = "The box's background processes (none when it is not running; does not wake it)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 200, body = ProcessList), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
) -> Result<Json<ProcessList>, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    Ok(Json(process::list(&ctx, &record.id).await?))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputParams {
    #[serde(default)]
    offset: u64,
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/processes/{id}/output", tag = "processes", summary = "A process's stdout and stderr from an offset (NDJSON `ProcessFrame`s), then its exit", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("id" = String, Path, description = "the process (`pr_…`)"), ("offset" = Option<u64>, Query, description = "resume here: the output bytes already received (default 0)")), responses((status = 200, description = "`output` frames (each with its offset; a jump shows output no longer kept), then one `exit` frame; a stream that ends without `exit` was cut: resume from the offset reached", content_type = "application/x-ndjson", body = ProcessFrame), (status = 404, description = "no such box or process", body = berth_protocol::ErrorBody), (status = 429, description = "the tenant holds `[server] max_streams_per_tenant` streams already (`too_many_requests`); retry after `Retry-After` seconds", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn output(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, id)): Path<(String, String)>,
    ApiQuery(params): ApiQuery<OutputParams>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let slot = ctx.streams.take(&who.tenant_id)?;
    let stream = process::output(&ctx, &record.id, &id, params.offset).await?;
    Ok((
        [(http::header::CONTENT_TYPE, NDJSON)],
        Body::from_stream(slot.holding(frames(stream))),
    )
        .into_response())
}

/// The guest's frames, one JSON line each, as they come; the stream ends after `exit`, or
/// where the guest's ends or broke (logged; the client resumes from its offset). A
/// service's log (`api::services`) is the same frames without an `exit`.
pub(crate) fn frames(
    stream: ProcessOutput,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::unfold(Some(stream), |state| async move {
        let mut stream = state?;
        let frame = match stream.next_frame().await {
            Ok(Some(frame)) => frame,
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(error = %error_chain(&e), "output from the box broke");
                return None;
            }
        };
        let last = matches!(frame, ProcessFrame::Exit { .. });
        let mut line = serde_json::to_vec(&frame).unwrap_or_default();
        line.push(b'\n');
        Some((Ok(Bytes::from(line)), (!last).then_some(stream)))
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdinParams {
    #[serde(default)]
    close: bool,
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/processes/{id}/stdin", tag = "processes", summary = "Stream bytes to a process's stdin (any length, as fast as it reads); `close=true` closes it after", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("id" = String, Path, description = "the process (`pr_…`)"), ("close" = Option<bool>, Query, description = "close stdin after these bytes")), request_body(content = Vec<u8>, content_type = "application/octet-stream"), responses((status = 204, description = "written"), (status = 404, description = "no such box or process", body = berth_protocol::ErrorBody), (status = 409, description = "stdin is not open (not asked for with `open_stdin`, closed, or another writer has it), or the process stopped reading", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn stdin(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, id)): Path<(String, String)>,
    ApiQuery(params): ApiQuery<StdinParams>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    process::write_stdin(&ctx, &record.id, &id, params.close, body).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalBody {
    /// HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP, TSTP or WINCH.
    signal: String,
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/processes/{id}/signal", tag = "processes", summary = "Send a signal to a process's group", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("id" = String, Path, description = "the process (`pr_…`)")), request_body = SignalBody, responses((status = 204, description = "sent (or the process had already exited)"), (status = 400, description = "unknown signal", body = berth_protocol::ErrorBody), (status = 404, description = "no such box or process", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn signal(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path((reference, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<SignalBody>,
) -> Result<StatusCode, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    process::signal(&ctx, &record.id, &id, &body.signal).await?;
    Ok(StatusCode::NO_CONTENT)
}
