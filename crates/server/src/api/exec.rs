//! `POST /v1/boxes/{ref}/exec`: collected JSON by default, NDJSON frames with
//! `Accept: application/x-ndjson`.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_protocol::guest::{BoxUser, ExecFrame};
use berth_protocol::ErrorCode;
use berth_runtime::ExecStream;
use bytes::Bytes;
use http::HeaderMap;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::ApiJson;
use crate::api::send_deadline;
use crate::ctx::Ctx;
use crate::lifecycle::ActivityGuard;
use crate::ops::box_find;
use crate::ops::exec::{exec_collect, exec_stream, ExecCommand};
use crate::ops::process::{self, Background};
use berth_runtime::error_chain;

pub const NDJSON: &str = "application/x-ndjson";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct ExecBody {
    cmd: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    user: BoxUser,
    /// Seconds before the process is killed: default 60, or none for a background one.
    #[serde(default)]
    timeout_s: Option<u64>,
    /// Answer at once with the process (201): it runs on whoever watches, its output kept
    /// for `GET …/processes/{id}/output`.
    #[serde(default)]
    background: bool,
    /// With `background`: whether the running process keeps the box awake (default true).
    #[serde(default)]
    keep_awake: Option<bool>,
    /// With `background`: keep stdin open for `POST …/processes/{id}/stdin`.
    #[serde(default)]
    open_stdin: bool,
}

impl ExecBody {
    /// The background process this body asks for, if it does; the options that only go
    /// with `background` are refused without it.
    fn background(self) -> Result<Result<Background, ExecCommand>, ApiError> {
        let (background, keep_awake, open_stdin) =
            (self.background, self.keep_awake, self.open_stdin);
        let command = ExecCommand {
            cmd: self.cmd,
            env: self.env,
            cwd: self.cwd,
            stdin: self.stdin,
            user: self.user,
            timeout_s: self.timeout_s,
        };
        if background {
            return Ok(Ok(Background {
                command,
                keep_awake: keep_awake.unwrap_or(true),
                open_stdin,
                tag: None,
            }));
        }
        if keep_awake.is_some() || open_stdin {
            return Err(ApiError::Malformed {
                part: "body",
                detail: "keep_awake and open_stdin go with background: true".into(),
            });
        }
        Ok(Err(command))
    }
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/exec", tag = "exec", summary = "Run a command in the box (wakes it); NDJSON frames with Accept: application/x-ndjson", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), request_body = ExecBody, responses((status = 200, description = "the collected result, or NDJSON `ExecFrame`s when asked for", content((crate::ops::exec::ExecOutput = "application/json"), (berth_protocol::guest::ExecFrame = "application/x-ndjson"))), (status = 201, description = "`background`: the process, started", body = berth_protocol::process::ProcessInfo), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 429, description = "too many collected execs at once, for the tenant or the daemon, or a streamed one when the tenant holds `[server] max_streams_per_tenant` streams (`too_many_requests`); retry after `Retry-After` seconds", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn exec(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    headers: HeaderMap,
    ApiJson(body): ApiJson<ExecBody>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let body = match body.background()? {
        Ok(background) => {
            let started = process::start(&ctx, &record.id, background).await?;
            return Ok((http::StatusCode::CREATED, Json(started)).into_response());
        }
        Err(command) => command,
    };
    let wants_stream = headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains(NDJSON));
    if wants_stream {
        // The box is in use until the response body is done or dropped, or its client
        // stops taking it.
        let slot = ctx.streams.take(&who.tenant_id)?;
        let busy = ctx.activity.begin(&record.id);
        let stream = exec_stream(&ctx, &record.id, body).await?;
        let send_timeout = ctx.stream_limits.send_timeout;
        Ok((
            [(http::header::CONTENT_TYPE, NDJSON)],
            send_deadline::body(slot.holding(frames(stream, busy)), send_timeout, &record.id),
        )
            .into_response())
    } else {
        let _slot = ctx.collected_execs.take(&who.tenant_id)?;
        Ok(Json(exec_collect(&ctx, &record.id, body).await?).into_response())
    }
}

/// The guest's frames, one JSON line each, as they arrive. A guest failure mid-stream
/// becomes a last `error` frame. When the client goes away (or stops reading: see
/// `api/send_deadline.rs`) this stream is dropped, which drops the guest stream, which
/// makes `berth-init` kill the process group.
fn frames(
    stream: ExecStream,
    busy: ActivityGuard,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::unfold(Some((stream, busy)), |state| async move {
        let (mut stream, busy) = state?;
        let (frame, more) = match stream.next_frame().await {
            Ok(Some(frame)) => {
                let last = matches!(frame, ExecFrame::Exit { .. } | ExecFrame::Error { .. });
                (frame, !last)
            }
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "exec stream from the box broke");
                (
                    ExecFrame::Error {
                        code: ErrorCode::Unavailable,
                        message: error_chain(&e),
                    },
                    false,
                )
            }
        };
        let mut line = serde_json::to_vec(&frame).unwrap_or_default();
        line.push(b'\n');
        Some((Ok(Bytes::from(line)), more.then_some((stream, busy))))
    })
}
