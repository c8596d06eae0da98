//! `SendSignal` (envd sends SIGTERM or SIGKILL; berth signals the process's group) and
//! `Update` (a PTY's window size).

use berth_e2b_wire::process::{
    SendSignalRequest, SendSignalResponse, Signal, UpdateRequest, UpdateResponse,
};
use berth_e2b_wire::ConnectError;

use super::select::{self, Target};
use super::stream::terminal_size;
use super::{box_of, ProcessCallError};
use crate::ctx::Ctx;
use crate::e2b::envd::caller::EnvdCaller;
use crate::e2b::envd::error::connect_error;
use crate::ops::{process, terminal};

/// `SendSignal`.
pub async fn signal(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: SendSignalRequest,
) -> Result<SendSignalResponse, ConnectError> {
    let name = match Signal::try_from(req.signal) {
        Ok(Signal::Sigterm) => "TERM",
        Ok(Signal::Sigkill) => "KILL",
        _ => return Err(ProcessCallError::UnknownSignal { signal: req.signal }.into()),
    };
    let id = box_of(caller);
    match select::find(ctx, caller, req.process).await? {
        Target::Process(info) => process::signal(ctx, id, &info.id, name)
            .await
            .map_err(connect_error)?,
        Target::Terminal(info) => terminal::signal(ctx, id, &info.id, name)
            .await
            .map_err(connect_error)?,
    }
    Ok(SendSignalResponse {})
}

/// `Update`: resizes a PTY (the program gets `SIGWINCH`); without a size it does nothing.
pub async fn update(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: UpdateRequest,
) -> Result<UpdateResponse, ConnectError> {
    let target = select::find(ctx, caller, req.process).await?;
    let Some(size) = req.pty.and_then(|p| p.size) else {
        return Ok(UpdateResponse {});
    };
    let size = terminal_size(size)?;
    match target {
        Target::Terminal(info) => terminal::resize(ctx, box_of(caller), &info.id, size)
            .await
            .map_err(connect_error)?,
        Target::Process(info) => {
            return Err(ProcessCallError::NotAPty {
                pid: info.pid,
                what: "resizing",
            }
            .into())
        }
    }
    Ok(UpdateResponse {})
}
