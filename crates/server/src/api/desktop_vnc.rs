//! `GET /v1/boxes/{ref}/desktop/vnc`: the box's desktop over a WebSocket (RFC 6455), for
//! noVNC in the web app or any RFB client that speaks WebSocket.
//!
//! Binary messages are RFB's bytes both ways, copied to and from the desktop's VNC server
//! (`ops/desktop_vnc.rs`), with no framing of berth's own; the subprotocol `binary` is
//! accepted when offered (noVNC's and websockify's name for it). Text messages from the
//! client are ignored. When the VNC server ends the connection (the box stopped, or the
//! server restarted), the daemon closes the WebSocket (1000, with the reason), and the
//! client reconnects when it wants to: a connection wakes the box.
//!
//! The caller is berth's (an API key or the web session's cookie); the VNC server asks no
//! password of its own. Watching does not keep the box awake: only what the client sends
//! that is a person's input does (`crate::rfb_input`), as it is sent. The two halves and
//! their limits are `api/ws_bridge.rs`'s.

use std::time::Duration;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use berth_store::BoxRecord;
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::ws_bridge::{await_close_reply, read_half, send, write_half, End, HandOn};
use crate::ctx::Ctx;
use crate::ops::{box_find, desktop_vnc};
use crate::ports::dial::AppStream;
use crate::rfb_input::InputWatch;

/// The largest WebSocket message a client may send (a paste into the desktop's
/// clipboard; a key or a pointer event is a few bytes).
const MAX_MESSAGE_BYTES: usize = 1024 * 1024;
/// How often input looks whether the box is paused (a read of its row): a moving pointer
/// sends dozens of events a second.
const PAUSED_CHECK_EVERY: Duration = Duration::from_secs(1);
/// The close code when the desktop's side ended the connection (RFC 6455: normal).
const CLOSE_NORMAL: u16 = 1000;

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/desktop/vnc", tag = "desktop", summary = "The box's desktop as RFB over a WebSocket (noVNC); wakes the box, but watching does not keep it awake", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), responses((status = 101, description = "a WebSocket (subprotocol `binary` when offered): binary messages are RFB bytes both ways, to and from the desktop's VNC server; a person's input (keys, pointer, paste) counts as activity, watching does not"), (status = 400, description = "not a WebSocket upgrade", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key or session", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 409, description = "the box has no desktop (its template runs no `vnc` service), or it sleeps with `auto_resume` off", body = berth_protocol::ErrorBody), (status = 429, description = "the tenant holds `[server] max_streams_per_tenant` streams already (`too_many_requests`)", body = berth_protocol::ErrorBody), (status = 503, description = "the desktop's VNC server did not listen within `[ports] listen_wait_s`", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn vnc(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(reference): Path<String>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let record = box_find::find_box(&ctx, &who.tenant_id, &reference)?;
    desktop_vnc::check(&ctx, &record)?;
    let upgrade = upgrade.map_err(|rejection| ApiError::Malformed {
        part: "WebSocket upgrade",
        detail: rejection.body_text(),
    })?;
    let slot = ctx.streams.take(&who.tenant_id)?;
    let desktop = desktop_vnc::connect(&ctx, &record).await?;
    Ok(upgrade
        .protocols(["binary"])
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| async move {
            // One of the tenant's streams while the desktop is shown.
            let _stream = slot;
            bridge(socket, desktop, &ctx, &record).await
        })
        .into_response())
}

/// Copies between the WebSocket and the desktop until one side ends.
async fn bridge(socket: WebSocket, desktop: AppStream, ctx: &Ctx, record: &BoxRecord) {
    let limits = ctx.stream_limits;
    let (mut to_client, mut from_client) = socket.split();
    let (output, input) = tokio::io::split(desktop.into_io());
    let mut to_desktop = ToDesktop {
        input,
        watch: InputWatch::default(),
        checked: None,
        ctx,
        record,
    };
    let end = tokio::select! {
        end = write_half(&mut to_client, output, None, &limits) => end,
        end = read_half(&mut from_client, &limits, &mut to_desktop) => end,
    };
    match end {
        End::Closed => {
            let close = CloseFrame {
                code: CLOSE_NORMAL,
                reason: "the desktop's VNC server closed the connection".into(),
            };
            if send(&mut to_client, Message::Close(Some(close)), &limits)
                .await
                .is_ok()
            {
                await_close_reply(&mut from_client, &limits).await;
            }
        }
        End::Silent => {
            tracing::info!(box_id = %record.id, "desktop client silent too long: closing");
        }
        End::NotReading => {
            tracing::info!(box_id = %record.id, "desktop client takes none of the screen: closing");
        }
        End::ClientGone => {}
    }
}

/// Where the client's messages go: RFB's bytes to the VNC server, a person's input in them
/// counted as the box's activity.
struct ToDesktop<'a, W> {
    input: W,
    watch: InputWatch,
    /// When input last looked whether the box is paused.
    checked: Option<Instant>,
    ctx: &'a Ctx,
    record: &'a BoxRecord,
}

impl<W: AsyncWrite + Unpin + Send> HandOn for ToDesktop<'_, W> {
    async fn hand_on(&mut self, message: Message) -> Result<(), End> {
        let Message::Binary(data) = message else {
            return Ok(());
        };
        let was_lost = self.watch.is_lost();
        let input = self.watch.feed(&data);
        if input {
            desktop_vnc::input(self.ctx, self.record);
            if self
                .checked
                .is_none_or(|at| at.elapsed() >= PAUSED_CHECK_EVERY)
            {
                self.checked = Some(Instant::now());
                desktop_vnc::wake_if_paused(self.ctx, self.record).await;
            }
        }
        if self.watch.is_lost() && !was_lost {
            tracing::info!(box_id = %self.record.id, "desktop client's RFB not followed: its input no longer keeps the box awake");
        }
        // An error: the server is gone; its end comes on the output side.
        let _ = self.input.write_all(&data).await;
        Ok(())
    }
}
