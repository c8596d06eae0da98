//! `filesystem.Filesystem`: envd's file calls, on berth's own file operations
//! (`ops::files`, `ops::files_watch`), as the caller's box user.
//!
//! - [`paths`]: envd's path rules (`~`, relative to the home);
//! - [`entry`]: berth's entries as envd's `EntryInfo` (Go's permission strings);
//! - [`calls`]: `Stat`, `MakeDir`, `Move`, `ListDir` (depth, bounded), `Remove`;
//! - [`watch`] (`WatchDir`, streamed), [`watchers`] (the polled watchers, bounded),
//!   [`events`] (berth's watch events in envd's terms).

mod calls;
mod entry;
mod events;
pub mod paths;
mod watch;
pub mod watcher_registry;
mod watchers;

use axum::extract::{Path, Request, State};
use axum::response::Response;
use berth_e2b_wire::RpcKind;

use super::caller::{identify, EnvdCaller};
use super::connect_serve::{refuse, server_stream, unary};
use crate::ctx::Ctx;

/// Every method of `filesystem.Filesystem`.
pub async fn serve(
    State(ctx): State<Ctx>,
    Path(method): Path<String>,
    request: Request,
) -> Response {
    let kind = match method.as_str() {
        "WatchDir" => RpcKind::Streaming,
        _ => RpcKind::Unary,
    };
    let (parts, body) = request.into_parts();
    let caller = match identify(&ctx, &parts) {
        Ok(caller) => caller,
        Err(error) => return refuse(&parts.headers, kind, error.into()),
    };
    let request = Request::from_parts(parts, body);
    dispatch(ctx, caller, &method, request).await
}

async fn dispatch(ctx: Ctx, caller: EnvdCaller, method: &str, request: Request) -> Response {
    let (ctx, caller) = (&ctx, &caller);
    match method {
        "Stat" => unary(request, |req| calls::stat(ctx, caller, req)).await,
        "MakeDir" => unary(request, |req| calls::make_dir(ctx, caller, req)).await,
        "Move" => unary(request, |req| calls::move_entry(ctx, caller, req)).await,
        "ListDir" => unary(request, |req| calls::list_dir(ctx, caller, req)).await,
        "Remove" => unary(request, |req| calls::remove(ctx, caller, req)).await,
        "WatchDir" => {
            server_stream(request, watch::keepalive, |req| {
                watch::watch_dir(ctx, caller, req)
            })
            .await
        }
        "CreateWatcher" => unary(request, |req| watchers::create(ctx, caller, req)).await,
        "GetWatcherEvents" => {
            unary(
                request,
                |req| async move { watchers::events(ctx, caller, &req) },
            )
            .await
        }
        "RemoveWatcher" => {
            unary(
                request,
                |req| async move { watchers::remove(ctx, caller, &req) },
            )
            .await
        }
        other => {
            let error = super::no_method(berth_e2b_wire::filesystem::SERVICE, other);
            refuse(request.headers(), RpcKind::Unary, error)
        }
    }
}
