//! `GET /v1/boxes/{ref}/pty`: a terminal in the box over a WebSocket (RFC 6455).
//!
//! Binary frames are the terminal's bytes both ways. Text frames are JSON control
//! messages, typed in `berth_protocol::terminal` (and in the OpenAPI document, for the web
//! app): from the client a `ClientControl`, `{"resize":{"cols","rows"}}` or
//! `{"signal":"INT"}`; from the server a `ServerControl`, first `{"id","offset"}` (the
//! terminal's id, and the output offset of the first binary byte that follows), then at
//! the end `{"exit":{"code"}}` (the shell's status: 128 + the signal when one ended the
//! program), `{"detached":{"reason"}}` (another client attached) or
//! `{"error":{"code","message"}}`, each followed by a close.
//!
//! A client that stops reading or answering is detached (`api/terminal_bridge.rs`). A
//! client that loses its connection reattaches with `?id=<id>&offset=<the first offset
//! plus the bytes it received>` (and its window's `cols` and `rows`, applied on
//! reattaching): it gets the rest of the output, nothing twice.

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use berth_protocol::guest::BoxUser;
use serde::Deserialize;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::terminal_bridge::bridge;
use crate::ctx::Ctx;
use crate::ops::box_find;
use crate::ops::terminal::{self, TerminalCommand, TerminalTarget};

/// The largest WebSocket message a client may send (a paste; the terminal's input queue
/// takes it in pieces anyway).
const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/pty", tag = "terminals", summary = "A terminal in the box over a WebSocket (wakes the box)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("cmd" = Option<Vec<String>>, Query, description = "the program and its arguments, one `cmd` each (default: the user's login shell)"), ("cols" = Option<u16>, Query, description = "window width (default 80)"), ("rows" = Option<u16>, Query, description = "window height (default 24)"), ("user" = Option<BoxUser>, Query, description = "`user` (default) or `root`"), ("cwd" = Option<String>, Query, description = "working directory (default: the user's home)"), ("env" = Option<Vec<String>>, Query, description = "`NAME=value`, one `env` each: variables for the program"), ("term" = Option<String>, Query, description = "TERM (default xterm-256color)"), ("grace_s" = Option<u64>, Query, description = "how long the terminal lives on after the connection drops (default 60)"), ("id" = Option<String>, Query, description = "reattach to this terminal instead of starting one"), ("offset" = Option<u64>, Query, description = "with `id`: the output offset to resume from")), responses((status = 101, description = "a WebSocket: binary frames are terminal bytes; text frames are JSON control messages"), (status = 400, description = "invalid request, or not a WebSocket upgrade", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box, or no such terminal", body = berth_protocol::ErrorBody), (status = 429, description = "the tenant holds `[server] max_streams_per_tenant` streams already, or the box 16 terminals (`too_many_requests`)", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn pty(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    RawQuery(query): RawQuery,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    let target = target(query.as_deref().unwrap_or(""))?;
    let upgrade = upgrade.map_err(|rejection| ApiError::Malformed {
        part: "WebSocket upgrade",
        detail: rejection.body_text(),
    })?;
    let slot = ctx.streams.take(&who.tenant_id)?;
    let busy = ctx.activity.begin(&record.id);
    let attached = terminal::attach(&ctx, &record.id, target).await?;
    Ok(upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| async move {
            // One of the tenant's streams while the terminal is attached.
            let _stream = slot;
            bridge(socket, attached, busy).await
        })
        .into_response())
}

/// The query: a new terminal's command, or `id` (and `offset`) of one to reattach to.
fn target(query: &str) -> Result<TerminalTarget, ApiError> {
    let bad = |detail: String| ApiError::Malformed {
        part: "query",
        detail,
    };
    let number = |key: &str, value: &str| {
        value
            .parse::<u64>()
            .map_err(|_| bad(format!("{key} must be a whole number, not {value:?}")))
    };
    let cells = |key: &str, value: &str| {
        value
            .parse::<u16>()
            .map_err(|_| bad(format!("{key} must be a number of cells, not {value:?}")))
    };
    let mut command = TerminalCommand::default();
    let (mut id, mut offset) = (None, None);
    // Parameters that describe a new terminal, which a reattach must not carry.
    let mut for_a_new_one = None;
    let mut sized = false;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        if !matches!(key.as_ref(), "id" | "offset" | "cols" | "rows") {
            for_a_new_one = Some(key.clone().into_owned());
        }
        match key.as_ref() {
            "cmd" => command.cmd.push(value.into_owned()),
            "cols" => {
                command.size.cols = cells("cols", &value)?;
                sized = true;
            }
            "rows" => {
                command.size.rows = cells("rows", &value)?;
                sized = true;
            }
            "user" => {
                command.user = BoxUser::deserialize(serde_json::Value::from(value.as_ref()))
                    .map_err(|_| bad(format!("user must be user or root, not {value:?}")))?
            }
            "cwd" => command.cwd = Some(value.into_owned()),
            "env" => {
                let (name, val) = value
                    .split_once('=')
                    .ok_or_else(|| bad(format!("env must be NAME=value, not {value:?}")))?;
                command.env.insert(name.to_owned(), val.to_owned());
            }
            "term" => command.term = Some(value.into_owned()),
            "grace_s" => command.grace_s = Some(number("grace_s", &value)?),
            "id" => id = Some(value.into_owned()),
            "offset" => offset = Some(number("offset", &value)?),
            other => return Err(bad(format!("unknown parameter {other:?}"))),
        }
    }
    match id {
        Some(id) if for_a_new_one.is_some() => Err(bad(format!(
            "id {id:?} reattaches to a terminal; {} is for a new one (only offset, cols and rows go with id)",
            for_a_new_one.unwrap_or_default()
        ))),
        Some(id) => Ok(TerminalTarget::Existing {
            id,
            offset,
            size: sized.then_some(command.size),
        }),
        None if offset.is_some() => Err(bad("offset needs id".into())),
        None => Ok(TerminalTarget::New(command)),
    }
}
