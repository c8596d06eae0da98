//! `WatchDir`: a server stream of a directory's changes, on berth's own watch
//! (`ops::files_watch`): `StartEvent` once the watch is set, then the events; keepalives
//! while it is quiet come from the Connect layer. It holds one of the tenant's streams, and
//! like berth's watch it does not keep the box awake (a box that stops ends it).

use berth_e2b_wire::filesystem::watch_dir_response::{Event, KeepAlive, StartEvent};
use berth_e2b_wire::filesystem::{WatchDirRequest, WatchDirResponse};
use berth_e2b_wire::{Code, ConnectError};
use berth_runtime::error_chain;
use berth_runtime::guest_client::WatchStream;
use futures_util::StreamExt;

use super::events::filesystem_events;
use super::paths::resolve;
use crate::ctx::Ctx;
use crate::e2b::envd::caller::EnvdCaller;
use crate::e2b::envd::connect_serve::Events;
use crate::e2b::envd::error::connect_error;
use crate::error::OpError;
use crate::ops::files::FileTarget;
use crate::ops::files_watch;

/// The keepalive message of a quiet `WatchDir` stream.
pub fn keepalive() -> WatchDirResponse {
    WatchDirResponse {
        event: Some(Event::Keepalive(KeepAlive {})),
    }
}

/// Starts berth's watch of `path` (resolved for the caller) as the caller's user.
pub async fn start(
    ctx: &Ctx,
    caller: &EnvdCaller,
    path: &str,
    recursive: bool,
) -> Result<WatchStream, ConnectError> {
    let target = FileTarget {
        path: resolve(path, caller.user)?,
        user: caller.user,
        recursive,
        mode: None,
    };
    files_watch::watch(ctx, &caller.sandbox.box_id, &target)
        .await
        .map_err(connect_error)
}

/// The next envd events of `stream`: `Ok(None)` when the watch ended.
pub async fn next_events(
    stream: &mut WatchStream,
) -> Result<Option<Vec<berth_e2b_wire::filesystem::FilesystemEvent>>, ConnectError> {
    loop {
        let frame = stream.next_frame().await.map_err(|error| {
            tracing::warn!(error = %error_chain(&error), "envd watch: the box's watch broke");
            ConnectError::new(
                Code::Unavailable,
                format!("the watch broke: {}", error_chain(&error)),
            )
        })?;
        let Some(event) = frame else {
            return Ok(None);
        };
        match filesystem_events(event) {
            None => return Ok(None),
            Some(events) if events.is_empty() => continue,
            Some(events) => return Ok(Some(events)),
        }
    }
}

pub async fn watch_dir(
    ctx: &Ctx,
    caller: &EnvdCaller,
    req: WatchDirRequest,
) -> Result<Events<WatchDirResponse>, ConnectError> {
    let slot = ctx
        .streams
        .take(&caller.sandbox.tenant)
        .map_err(|e: OpError| connect_error(e))?;
    let stream = start(ctx, caller, &req.path, req.recursive).await?;
    let started = futures_util::stream::iter([Ok(WatchDirResponse {
        event: Some(Event::Start(StartEvent {})),
    })]);
    let changes = futures_util::stream::unfold(Some(stream), |state| async move {
        let mut stream = state?;
        match next_events(&mut stream).await {
            Ok(Some(events)) => Some((Ok(events), Some(stream))),
            Ok(None) => None,
            Err(error) => Some((Err(error), None)),
        }
    })
    .flat_map(|batch| {
        let messages: Vec<Result<WatchDirResponse, ConnectError>> = match batch {
            Ok(events) => events
                .into_iter()
                .map(|event| {
                    Ok(WatchDirResponse {
                        event: Some(Event::Filesystem(event)),
                    })
                })
                .collect(),
            Err(error) => vec![Err(error)],
        };
        futures_util::stream::iter(messages)
    });
    Ok(Box::pin(slot.holding(started.chain(changes))))
}
