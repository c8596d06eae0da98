//! `SendInput`, `StreamInput` and `CloseStdin`: bytes to a command's stdin (berth's
//! process stdin, which a command has when started with `stdin`), or to a PTY.
//!
//! A berth terminal takes input only through its attachment, and has one attachment at a
//! time. So while a `Start` or `Connect` stream of a PTY is open, its input side is kept in
//! [`super::pty_inputs::PtyInputs`] (the daemon's, in `ctx.e2b`) and input goes through it; with none open, input attaches for as long as it
//! writes (the output it would carry is not read).

use berth_e2b_wire::process::{
    process_input::Input, stream_input_request::Event, CloseStdinRequest, CloseStdinResponse,
    SendInputRequest, SendInputResponse, StreamInputRequest, StreamInputResponse,
};
use berth_e2b_wire::ConnectError;
use berth_protocol::BoxId;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::Full;
use tokio::io::AsyncWriteExt;

use super::select::{self, Target};
use super::{box_of, ProcessCallError};
use crate::ctx::Ctx;
use crate::e2b::envd::caller::EnvdCaller;
use crate::e2b::envd::connect_serve::Incoming;
use crate::e2b::envd::error::connect_error;
use crate::ops::process;
use crate::ops::terminal::{self, TerminalTarget};

/// `SendInput`.
pub async fn send(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: SendInputRequest,
) -> Result<SendInputResponse, ConnectError> {
    let input = req
        .input
        .and_then(|i| i.input)
        .ok_or(ProcessCallError::NoInput)?;
    let target = select::find(ctx, caller, req.process).await?;
    write(ctx, caller, &target, input).await?;
    Ok(SendInputResponse {})
}

/// `StreamInput`: a start event naming the process, then its input in order (keepalives
/// skipped), each written before the next is read.
pub async fn stream(
    ctx: &Ctx,
    caller: &EnvdCaller,
    mut incoming: Incoming<StreamInputRequest>,
) -> Result<StreamInputResponse, ConnectError> {
    let target = loop {
        match incoming.next().await.transpose()?.and_then(|m| m.event) {
            Some(Event::Start(start)) => break select::find(ctx, caller, start.process).await?,
            Some(Event::Keepalive(_)) => continue,
            Some(Event::Data(_)) | None => return Err(ProcessCallError::NoStreamStart.into()),
        }
    };
    while let Some(message) = incoming.next().await {
        match message?.event {
            Some(Event::Data(data)) => {
                if let Some(input) = data.input.and_then(|i| i.input) {
                    write(ctx, caller, &target, input).await?;
                }
            }
            Some(Event::Keepalive(_)) | None => {}
            Some(Event::Start(_)) => return Err(ProcessCallError::NoStreamStart.into()),
        }
    }
    Ok(StreamInputResponse {})
}

/// `CloseStdin`: the command's stdin reaches its end. A PTY has none (envd says the
/// same): it takes Ctrl-D as input instead.
pub async fn close(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: CloseStdinRequest,
) -> Result<CloseStdinResponse, ConnectError> {
    match select::find(ctx, caller, req.process).await? {
        Target::Process(info) => {
            process::write_stdin(ctx, box_of(caller), &info.id, true, Full::new(Bytes::new()))
                .await
                .map_err(connect_error)?;
            Ok(CloseStdinResponse {})
        }
        Target::Terminal(info) => Err(ProcessCallError::IsAPty {
            pid: info.pid,
            what: "closing stdin",
        }
        .into()),
    }
}

async fn write(
    ctx: &Ctx,
    caller: &EnvdCaller,
    target: &Target,
    input: Input,
) -> Result<(), ConnectError> {
    let id = box_of(caller);
    match (target, input) {
        (Target::Process(info), Input::Stdin(bytes)) => {
            process::write_stdin(ctx, id, &info.id, false, Full::new(Bytes::from(bytes)))
                .await
                .map_err(connect_error)
        }
        (Target::Terminal(info), Input::Pty(bytes)) => write_pty(ctx, id, &info.id, &bytes).await,
        (Target::Process(info), Input::Pty(_)) => Err(ProcessCallError::NotAPty {
            pid: info.pid,
            what: "PTY input",
        }
        .into()),
        (Target::Terminal(info), Input::Stdin(_)) => Err(ProcessCallError::IsAPty {
            pid: info.pid,
            what: "stdin input",
        }
        .into()),
    }
}

/// Writes to a terminal through the stream attached to it, or through an attachment of
/// its own when none is.
async fn write_pty(ctx: &Ctx, box_id: &BoxId, id: &str, bytes: &[u8]) -> Result<(), ConnectError> {
    let attached = ctx.e2b.pty_inputs.get(box_id, id);
    let written = match attached {
        Some(input) => {
            let mut input = input.lock().await;
            write_all(&mut *input, bytes).await
        }
        None => {
            let target = TerminalTarget::Existing {
                id: id.to_owned(),
                offset: None,
                size: None,
            };
            let mut attached = terminal::attach(ctx, box_id, target)
                .await
                .map_err(connect_error)?;
            write_all(&mut attached.stream.stream, bytes).await
        }
    };
    written.map_err(|error| {
        ConnectError::new(
            berth_e2b_wire::Code::Unavailable,
            format!("the PTY's input did not reach the box: {error}"),
        )
    })
}

async fn write_all(
    to: &mut (impl tokio::io::AsyncWrite + Unpin),
    bytes: &[u8],
) -> std::io::Result<()> {
    to.write_all(bytes).await?;
    to.flush().await
}
