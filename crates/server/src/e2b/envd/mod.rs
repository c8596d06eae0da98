//! E2B's in-sandbox API ("envd"), served by the daemon: the SDKs' `commands`, `pty` and
//! `files` reach a sandbox's box through it, translated to berth's own operations (the same
//! `ops` calls berth's API makes; nothing here talks to a box another way).
//!
//! A request reaches it under `/e2b` with the `E2b-Sandbox-Id` header, or at the host name
//! `49983-<sandboxID>.<base_domain>`; [`caller`] says whose it is. The surfaces:
//! - Connect (`connect_serve` serves the protocol, `berth-e2b-wire` encodes it):
//!   [`process`] (`process.Process`: commands and PTYs, as berth background processes and
//!   terminals) and [`filesystem`] (`filesystem.Filesystem`);
//! - plain HTTP: `/health` (here) and `/files` ([`files_http`]).

pub mod caller;
pub mod connect_serve;
#[cfg(test)]
mod connect_serve_tests;
pub mod error;
mod files_http;
pub(crate) mod filesystem;
pub(crate) mod process;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use berth_e2b_wire::{Code, ConnectError, RpcKind};
use berth_store::BoxState;
use http::StatusCode;
use tower_service::Service as _;

use crate::ctx::Ctx;
use caller::ACCESS_TOKEN_HEADER;

/// The port the SDKs give envd (`49983-<sandboxID>.<base_domain>`).
pub const ENVD_PORT: u16 = 49983;

/// envd's routes.
pub fn router() -> Router<Ctx> {
    Router::new()
        .route("/process.Process/{method}", post(process::serve))
        .route("/filesystem.Filesystem/{method}", post(filesystem::serve))
        .route("/files", get(files_http::download).post(files_http::upload))
        .route("/health", get(health))
        .fallback(unknown)
}

/// Middleware of `/e2b`: a request that names a sandbox (`E2b-Sandbox-Id`) is envd's, any
/// other the control plane's.
pub async fn by_sandbox_header(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    if !request.headers().contains_key(caller::SANDBOX_ID_HEADER) {
        return next.run(request).await;
    }
    serve(ctx, request).await
}

/// Serves one envd request (the sandbox is named by the header or the host).
pub async fn serve(ctx: Ctx, request: Request) -> Response {
    // A router is always ready: no poll_ready is owed before the call.
    match router().with_state(ctx).call(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

/// `GET /health`: `204` while the sandbox runs; `502` otherwise, as E2B's proxy answers for
/// a sandbox that is paused or gone (the SDK's `is_running()` reads exactly that). An unknown
/// sandbox or a wrong token is "not running" too: nothing else is said without the token.
async fn health(State(ctx): State<Ctx>, request: Request) -> StatusCode {
    let (parts, _) = request.into_parts();
    let token = parts
        .headers
        .get(ACCESS_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok());
    match caller::sandbox(&ctx, &parts, token) {
        Ok(sandbox) if sandbox.record.state == BoxState::Running => StatusCode::NO_CONTENT,
        _ => StatusCode::BAD_GATEWAY,
    }
}

/// A path envd does not have: a Connect call to an unknown service is `unimplemented`, in
/// the shape its content type asks for; anything else a plain `404`.
async fn unknown(request: Request) -> Response {
    let content_type = request
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let kind = match content_type.starts_with("application/connect+") {
        true => RpcKind::Streaming,
        false => RpcKind::Unary,
    };
    let error = ConnectError::new(
        Code::Unimplemented,
        format!("envd has no {} here", request.uri().path()),
    );
    if content_type.starts_with("application/") {
        return connect_serve::refuse(request.headers(), kind, error);
    }
    (StatusCode::NOT_FOUND, error.message).into_response()
}

/// `unimplemented` for a method of `service` that envd does not have.
pub fn no_method(service: &str, method: &str) -> ConnectError {
    ConnectError::new(
        Code::Unimplemented,
        format!("{service} has no method {method}"),
    )
}
