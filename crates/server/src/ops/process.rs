//! Background processes (`/v1/boxes/{ref}/processes…`): start one that runs on whoever
//! watches (waking the box), and reach the ones running. A stopped box has none: its
//! processes ended with it, so nothing here but the start wakes a box.

use berth_protocol::process::{ProcessInfo, ProcessList, ProcessRequest};
use berth_protocol::BoxId;
use berth_runtime::{GuestClient, ProcessOutput};
use bytes::Bytes;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::exec::ExecCommand;

/// How a background process is started.
#[derive(Debug, Clone, PartialEq)]
pub struct Background {
    pub command: ExecCommand,
    pub keep_awake: bool,
    pub open_stdin: bool,
    /// The caller's name for the process (E2B's `tag`).
    pub tag: Option<String>,
}

/// Starts the process and answers at once.
pub async fn start(ctx: &Ctx, id: &BoxId, background: Background) -> Result<ProcessInfo, OpError> {
    let request = request(ctx, id, background)?;
    let _busy = ctx.activity.begin(id);
    ctx.lifecycle()
        .with_guest(id, |client| {
            let request = request.clone();
            async move { client.process_start(&request).await }
        })
        .await
}

/// Starts the process and follows its output from its first byte (one round trip to the
/// box): for a caller that waits for the command's end, as E2B's `commands.run` does.
pub async fn start_followed(
    ctx: &Ctx,
    id: &BoxId,
    background: Background,
) -> Result<(ProcessInfo, ProcessOutput), OpError> {
    let request = request(ctx, id, background)?;
    let _busy = ctx.activity.begin(id);
    ctx.lifecycle()
        .with_guest(id, |client| {
            let request = request.clone();
            async move { client.process_start_followed(&request).await }
        })
        .await
}

fn request(ctx: &Ctx, id: &BoxId, mut background: Background) -> Result<ProcessRequest, OpError> {
    let command = &mut background.command;
    command.env = crate::box_env::env_for_box(ctx, id, std::mem::take(&mut command.env))?;
    Ok(ProcessRequest {
        exec: background.command.into_request_with(None)?,
        keep_awake: background.keep_awake,
        open_stdin: background.open_stdin,
        tag: background.tag,
    })
}

/// The box's processes; none when it is not running.
pub async fn list(ctx: &Ctx, id: &BoxId) -> Result<ProcessList, OpError> {
    match running(ctx, id).await {
        Some(client) => Ok(client.processes().await?),
        None => Ok(ProcessList::default()),
    }
}

/// A process's output from `offset`, then its exit.
pub async fn output(
    ctx: &Ctx,
    id: &BoxId,
    process: &str,
    offset: u64,
) -> Result<ProcessOutput, OpError> {
    Ok(client_for(ctx, id, process)
        .await?
        .process_output(process, offset)
        .await?)
}

/// Streams `body` into the process's stdin (then closes it when `close`), as fast as the
/// process reads it. The box counts as in use meanwhile.
pub async fn write_stdin<B>(
    ctx: &Ctx,
    id: &BoxId,
    process: &str,
    close: bool,
    body: B,
) -> Result<(), OpError>
where
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<berth_runtime::guest_client::BodyError>,
{
    let _busy = ctx.activity.begin(id);
    let upload = client_for(ctx, id, process)
        .await?
        .process_stdin(process, close)
        .await?;
    Ok(upload.send(body).await?)
}

pub async fn signal(ctx: &Ctx, id: &BoxId, process: &str, signal: &str) -> Result<(), OpError> {
    Ok(client_for(ctx, id, process)
        .await?
        .process_signal(process, signal)
        .await?)
}

/// The running boot's client, or `NoSuchProcess` (a stopped box has no processes).
async fn client_for(ctx: &Ctx, id: &BoxId, process: &str) -> Result<GuestClient, OpError> {
    running(ctx, id)
        .await
        .ok_or_else(|| OpError::NoSuchProcess {
            id: process.to_owned(),
        })
}

async fn running(ctx: &Ctx, id: &BoxId) -> Option<GuestClient> {
    ctx.boxes.slot(id).lifecycle.lock().await.client.clone()
}
