//! `GET /v1/boxes/{ref}/files/watch`: a directory's changes as NDJSON, until the client
//! leaves. A watch does not keep the box awake.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::response::Response;
use berth_protocol::files::WatchEvent;
use berth_protocol::guest::BoxUser;
use berth_runtime::guest_client::WatchStream;
use bytes::Bytes;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::exec::NDJSON;
use crate::api::extract::ApiQuery;
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::files::FileTarget;
use crate::ops::files_watch;
use berth_runtime::error_chain;

/// An empty line this often keeps proxies from closing a quiet watch, and shows the daemon
/// a client that left.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchParams {
    path: String,
    #[serde(default)]
    user: BoxUser,
    #[serde(default)]
    recursive: bool,
}

impl From<WatchParams> for FileTarget {
    fn from(p: WatchParams) -> Self {
        FileTarget {
            path: p.path,
            user: p.user,
            recursive: p.recursive,
            mode: None,
        }
    }
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/files/watch", tag = "files", summary = "Watch a directory's changes (NDJSON)", description = "One `WatchEvent` per line: `create`, `modify`, `delete`, `rename` (from/to, when both ends are in the watched tree; a move out is a `delete`, a move in a `create`), each with the path relative to `path` and whether it is a directory; `overflow` when events were dropped (the reader was slow, or the box's queue of 4096 events filled): rescan; `gone` when the watched directory itself went away, and the stream ends. An empty line every 15 s keeps the connection alive. Watching does not keep the box awake; a box that goes to sleep ends the stream.", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("path" = String, Query, description = "absolute path of a directory in the box"), ("user" = Option<berth_protocol::guest::BoxUser>, Query, description = "`user` (default) or `root`"), ("recursive" = Option<bool>, Query, description = "watch subdirectories too, including new ones (symlinks are not followed)")), responses((status = 200, description = "NDJSON `WatchEvent`s", content_type = "application/x-ndjson", body = berth_protocol::files::WatchEvent), (status = 400, description = "invalid request, or not a directory", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box, or no such path", body = berth_protocol::ErrorBody), (status = 429, description = "the tenant holds `[server] max_streams_per_tenant` streams already, or the box 64 watches (`too_many_requests`)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn watch(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    ApiQuery(params): ApiQuery<WatchParams>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let slot = ctx.streams.take(&who.tenant_id)?;
    let stream = files_watch::watch(&ctx, &record.id, &params.into()).await?;
    let mut response = Response::new(Body::from_stream(slot.holding(lines(stream))));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(NDJSON),
    );
    Ok(response)
}

/// The box's events, one JSON line each, with an empty line after a quiet
/// [`KEEP_ALIVE`]. A break from the box ends the body with an error (the client sees the
/// connection cut, never a quiet watch that no longer watches).
fn lines(
    stream: WatchStream,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    futures_util::stream::unfold(Some(stream), |state| async move {
        let mut stream = state?;
        // `next_frame` keeps what it has read in the stream, so giving up on it for a
        // keepalive loses nothing.
        let next = match tokio::time::timeout(KEEP_ALIVE, stream.next_frame()).await {
            Err(_elapsed) => return Some((Ok(Bytes::from_static(b"\n")), Some(stream))),
            Ok(next) => next,
        };
        match next {
            Ok(Some(WatchEvent::Unknown)) => Some((Ok(Bytes::new()), Some(stream))),
            Ok(Some(event)) => {
                let mut line = serde_json::to_vec(&event).unwrap_or_default();
                line.push(b'\n');
                Some((Ok(Bytes::from(line)), Some(stream)))
            }
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "file watch from the box broke");
                Some((Err(std::io::Error::other(e)), None))
            }
        }
    })
}
