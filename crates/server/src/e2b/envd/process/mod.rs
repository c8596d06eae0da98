//! `process.Process`: the SDKs' `commands` and `pty`. A command is a berth background
//! process (`ops::process`), a PTY a berth terminal (`ops::terminal`); both are selected by
//! the guest's pid or by their tag.
//!
//! - [`stream`]: `Start` and `Connect`, the events of one process or terminal;
//! - [`select`]: finding one by a selector, and `List`;
//! - [`input`]: `SendInput`, `StreamInput`, `CloseStdin`;
//! - [`control`]: `SendSignal`, and `Update` (a PTY's size).

mod control;
mod input;
pub mod pty_inputs;
mod select;
mod stream;

use axum::extract::{Path, Request, State};
use axum::response::Response;
use berth_e2b_wire::process::{
    process_event, ConnectResponse, ListRequest, ProcessEvent, StartResponse,
};
use berth_e2b_wire::{Code, ConnectError, RpcKind};

use super::caller::{self, EnvdCaller};
use super::connect_serve::{client_stream, refuse, server_stream, unary};
use crate::ctx::Ctx;

/// Why a `process.Process` call is refused before berth is asked anything.
#[derive(Debug, thiserror::Error)]
pub enum ProcessCallError {
    #[error("the request names no process: set `process` to a pid or a tag")]
    NoSelector,
    #[error("no running process or PTY has {selector}")]
    NotFound { selector: String },
    #[error("the request has no process config (`process.cmd`)")]
    NoConfig,
    #[error("signal {signal} is not one envd sends: SIGNAL_SIGTERM (15) or SIGNAL_SIGKILL (9)")]
    UnknownSignal { signal: i32 },
    #[error("the request has no input (`input.stdin` or `input.pty`)")]
    NoInput,
    #[error("{what}: process {pid} has no PTY")]
    NotAPty { pid: u32, what: &'static str },
    #[error("{what}: process {pid} is a PTY (send its input as `pty`; Ctrl-D (0x04) ends it)")]
    IsAPty { pid: u32, what: &'static str },
    #[error("a PTY size needs cols and rows between 1 and 4096, got {cols}x{rows}")]
    BadSize { cols: u32, rows: u32 },
    #[error("a tag is at most {max} bytes", max = berth_protocol::process::MAX_TAG_BYTES)]
    LongTag,
    #[error("a StreamInput stream must begin with a start event naming the process")]
    NoStreamStart,
}

impl From<ProcessCallError> for ConnectError {
    fn from(error: ProcessCallError) -> Self {
        let code = match error {
            ProcessCallError::NotFound { .. } => Code::NotFound,
            ProcessCallError::NotAPty { .. } | ProcessCallError::IsAPty { .. } => {
                Code::FailedPrecondition
            }
            _ => Code::InvalidArgument,
        };
        ConnectError::new(code, error.to_string())
    }
}

/// Every method of `process.Process`: the caller is identified, then the method runs.
pub async fn serve(
    State(ctx): State<Ctx>,
    Path(method): Path<String>,
    request: Request,
) -> Response {
    let kind = match method.as_str() {
        "Start" | "Connect" | "StreamInput" => RpcKind::Streaming,
        _ => RpcKind::Unary,
    };
    let (parts, body) = request.into_parts();
    let caller = match caller::identify(&ctx, &parts) {
        Ok(caller) => caller,
        Err(error) => return refuse(&parts.headers, kind, error.into()),
    };
    let request = Request::from_parts(parts, body);
    let (ctx, c) = (&ctx, &caller);
    match method.as_str() {
        "Start" => server_stream(request, start_keepalive, |req| stream::start(ctx, c, req)).await,
        "Connect" => {
            server_stream(request, connect_keepalive, |req| {
                stream::connect(ctx, c, req)
            })
            .await
        }
        "List" => unary(request, |_: ListRequest| select::list(ctx, c)).await,
        "SendInput" => unary(request, |req| input::send(ctx, c, req)).await,
        "StreamInput" => client_stream(request, |incoming| input::stream(ctx, c, incoming)).await,
        "CloseStdin" => unary(request, |req| input::close(ctx, c, req)).await,
        "SendSignal" => unary(request, |req| control::signal(ctx, c, req)).await,
        "Update" => unary(request, |req| control::update(ctx, c, req)).await,
        _ => refuse(
            request.headers(),
            kind,
            super::no_method("process.Process", &method),
        ),
    }
}

/// The caller's sandbox box.
fn box_of(caller: &EnvdCaller) -> &berth_protocol::BoxId {
    &caller.sandbox.box_id
}

fn keepalive() -> ProcessEvent {
    ProcessEvent {
        event: Some(process_event::Event::Keepalive(process_event::KeepAlive {})),
    }
}

fn start_keepalive() -> StartResponse {
    StartResponse {
        event: Some(keepalive()),
    }
}

fn connect_keepalive() -> ConnectResponse {
    ConnectResponse {
        event: Some(keepalive()),
    }
}
