//! The control plane's HTTP handlers: each parses, authorizes (`X-API-KEY`) and calls one
//! operation of this module, then shapes E2B's answer.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use http::{HeaderMap, StatusCode};
use serde::Deserialize;

use crate::ctx::Ctx;
use crate::e2b::connect::{self, Connected};
use crate::e2b::create::{self, CreateSandbox, V1_DEFAULT_TIMEOUT_S, V2_DEFAULT_TIMEOUT_S};
use crate::e2b::error::E2bError;
use crate::e2b::list::{self, ListQuery};
use crate::e2b::lookup::find;
use crate::e2b::request::{E2bCaller, E2bJson, E2bOptionalJson, E2bQuery};
use crate::e2b::wire::{
    ConnectSandbox, ConnectSandboxV2, ListedSandbox, NewSandbox, PauseRequest, ResumedSandbox,
    Sandbox, SandboxDetail, SandboxMetric, SandboxesWithMetrics, TimeoutRequest,
};
use crate::e2b::{kill, metrics, pause, timeout, view, PREFIX};

/// `GET /health`: the control plane answers (no key needed).
pub async fn health() -> StatusCode {
    StatusCode::NO_CONTENT
}

/// `POST /sandboxes`.
pub async fn create_v1(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    headers: HeaderMap,
    E2bJson(body): E2bJson<NewSandbox>,
) -> Result<Response, E2bError> {
    create(ctx, who.tenant_id, &headers, body, V1_DEFAULT_TIMEOUT_S).await
}

/// `POST /v2/sandboxes`.
pub async fn create_v2(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    headers: HeaderMap,
    E2bJson(body): E2bJson<NewSandbox>,
) -> Result<Response, E2bError> {
    create(ctx, who.tenant_id, &headers, body, V2_DEFAULT_TIMEOUT_S).await
}

async fn create(
    ctx: Ctx,
    tenant: berth_protocol::TenantId,
    headers: &HeaderMap,
    request: NewSandbox,
    default_timeout_s: i64,
) -> Result<Response, E2bError> {
    let idempotency_key = match headers.get("idempotency-key") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| E2bError::InvalidIdempotencyKey)?
                .to_owned(),
        ),
    };
    let req = CreateSandbox {
        request,
        default_timeout_s,
        idempotency_key,
    };
    let (record, row) = create::create(&ctx, &tenant, req).await?;
    let body: Sandbox = view::sandbox(&ctx, &record, &row);
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `GET /sandboxes`: the running sandboxes, `metadata`-filtered, on one page.
pub async fn list_v1(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    E2bQuery(query): E2bQuery<MetadataQuery>,
) -> Result<Json<Vec<ListedSandbox>>, E2bError> {
    let mut all = Vec::new();
    let mut query = ListQuery {
        metadata: query.metadata,
        state: Some("running".into()),
        ..ListQuery::default()
    };
    loop {
        let page = list::list(&ctx, &who.tenant_id, &query)?;
        all.extend(page.sandboxes.iter().map(|(r, s)| view::listed(&ctx, r, s)));
        match page.next_token {
            Some(token) => query.next_token = Some(token),
            None => return Ok(Json(all)),
        }
    }
}

/// `GET /sandboxes`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataQuery {
    #[serde(default)]
    metadata: Option<String>,
}

/// `GET /v2/sandboxes`: one page, the next one's token in `x-next-token`.
pub async fn list_v2(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    E2bQuery(query): E2bQuery<ListQuery>,
) -> Result<Response, E2bError> {
    let page = list::list(&ctx, &who.tenant_id, &query)?;
    let body: Vec<ListedSandbox> = page
        .sandboxes
        .iter()
        .map(|(record, row)| view::listed(&ctx, record, row))
        .collect();
    let mut response = Json(body).into_response();
    let headers = response.headers_mut();
    if let Some(token) = page.next_token {
        if let Ok(value) = token.parse() {
            headers.insert("x-next-token", value);
        }
    }
    if let Some(total) = page.total_running {
        headers.insert("x-total-running", total.into());
    }
    Ok(response)
}

/// `GET /sandboxes/{id}`.
pub async fn info(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    Path(sandbox_id): Path<String>,
) -> Result<Json<SandboxDetail>, E2bError> {
    let (record, row) = find(&ctx, &who.tenant_id, &sandbox_id)?;
    Ok(Json(view::detail(&ctx, &record, &row)))
}

/// `DELETE /sandboxes/{id}`.
pub async fn kill(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    Path(sandbox_id): Path<String>,
) -> Result<StatusCode, E2bError> {
    kill::kill(&ctx, &who.tenant_id, &sandbox_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/connect`.
pub async fn connect_v1(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    Path(sandbox_id): Path<String>,
    E2bJson(body): E2bJson<ConnectSandbox>,
) -> Result<Response, E2bError> {
    connected(ctx, who.tenant_id, &sandbox_id, body.timeout, body.memory).await
}

/// `POST /v2/sandboxes/{id}/connect`.
pub async fn connect_v2(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    Path(sandbox_id): Path<String>,
    E2bOptionalJson(body): E2bOptionalJson<ConnectSandboxV2>,
) -> Result<Response, E2bError> {
    let timeout = body.timeout.unwrap_or(V2_DEFAULT_TIMEOUT_S);
    connected(ctx, who.tenant_id, &sandbox_id, timeout, body.memory).await
}

async fn connected(
    ctx: Ctx,
    tenant: berth_protocol::TenantId,
    sandbox_id: &str,
    timeout_s: i64,
    memory: Option<bool>,
) -> Result<Response, E2bError> {
    let (how, record, row) = connect::connect(&ctx, &tenant, sandbox_id, timeout_s, memory).await?;
    let status = match how {
        Connected::WasRunning => StatusCode::OK,
        Connected::Resumed => StatusCode::CREATED,
    };
    Ok((status, Json(view::sandbox(&ctx, &record, &row))).into_response())
}

/// `POST /sandboxes/{id}/resume` (E2B's older form of connect).
pub async fn resume(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    Path(sandbox_id): Path<String>,
    E2bOptionalJson(body): E2bOptionalJson<ResumedSandbox>,
) -> Result<Response, E2bError> {
    let timeout = body.timeout.unwrap_or(V1_DEFAULT_TIMEOUT_S);
    let (record, row) =
        connect::resume(&ctx, &who.tenant_id, &sandbox_id, timeout, body.memory).await?;
    Ok((
        StatusCode::CREATED,
        Json(view::sandbox(&ctx, &record, &row)),
    )
        .into_response())
}

/// `POST /sandboxes/{id}/pause`.
pub async fn pause(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    Path(sandbox_id): Path<String>,
    E2bOptionalJson(body): E2bOptionalJson<PauseRequest>,
) -> Result<StatusCode, E2bError> {
    let memory = body.memory.unwrap_or(true);
    pause::pause(&ctx, &who.tenant_id, &sandbox_id, memory).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /sandboxes/{id}/timeout`.
pub async fn set_timeout(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    Path(sandbox_id): Path<String>,
    E2bJson(body): E2bJson<TimeoutRequest>,
) -> Result<StatusCode, E2bError> {
    timeout::set_timeout(&ctx, &who.tenant_id, &sandbox_id, body.timeout)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /sandboxes/{id}/metrics`'s query: Unix seconds.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsQuery {
    #[serde(default)]
    start: Option<i64>,
    #[serde(default)]
    end: Option<i64>,
}

/// `GET /sandboxes/{id}/metrics`.
pub async fn sandbox_metrics(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    Path(sandbox_id): Path<String>,
    E2bQuery(query): E2bQuery<MetricsQuery>,
) -> Result<Json<Vec<SandboxMetric>>, E2bError> {
    let samples =
        metrics::of_sandbox(&ctx, &who.tenant_id, &sandbox_id, query.start, query.end).await?;
    Ok(Json(samples))
}

/// `GET /sandboxes/metrics`'s query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdsQuery {
    sandbox_ids: String,
}

/// `GET /sandboxes/metrics`.
pub async fn sandboxes_metrics(
    State(ctx): State<Ctx>,
    E2bCaller(who): E2bCaller,
    E2bQuery(query): E2bQuery<IdsQuery>,
) -> Result<Json<SandboxesWithMetrics>, E2bError> {
    Ok(Json(
        metrics::of_sandboxes(&ctx, &who.tenant_id, &query.sandbox_ids).await?,
    ))
}

/// E2B endpoints berth does not serve, each with what to use instead.
pub async fn fork(E2bCaller(_): E2bCaller) -> E2bError {
    E2bError::UnsupportedEndpoint {
        what: "forking a sandbox",
        instead:
            "create another sandbox; a box's disk can be copied with `berth cp` or the files API",
    }
}

pub async fn snapshots(E2bCaller(_): E2bCaller) -> E2bError {
    E2bError::UnsupportedEndpoint {
        what: "snapshots as templates",
        instead: "pause keeps a sandbox (processes and disk) until it is killed; berth templates are TOML files (docs/templates.md)",
    }
}

pub async fn logs(E2bCaller(_): E2bCaller) -> E2bError {
    E2bError::UnsupportedEndpoint {
        what: "sandbox logs",
        instead: "a box's events are at GET /v1/boxes/{id}/events (`berth logs <sandbox id>`)",
    }
}

pub async fn network(E2bCaller(_): E2bCaller) -> E2bError {
    E2bError::UnsupportedEndpoint {
        what: "changing a running sandbox's network",
        instead: "a box's egress policy is given when it is made (network.allowOut with denyOut [\"0.0.0.0/0\"])",
    }
}

pub async fn refreshes(E2bCaller(_): E2bCaller) -> E2bError {
    E2bError::UnsupportedEndpoint {
        what: "refreshing a sandbox",
        instead: "set its timeout (POST /sandboxes/{id}/timeout) or connect to it",
    }
}

/// Routes the E2B API does not have (the path as the client sent it, `/e2b` and all).
pub async fn no_route(method: http::Method, uri: http::Uri) -> E2bError {
    E2bError::NoRoute {
        method,
        path: format!("{PREFIX}{}", uri.path()),
    }
}

pub async fn method_not_allowed(method: http::Method, uri: http::Uri) -> E2bError {
    E2bError::MethodNotAllowed {
        method,
        path: format!("{PREFIX}{}", uri.path()),
    }
}
