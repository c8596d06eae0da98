//! A box's own wakeup requests: `berth-init` journals each `berth-wake` call as a
//! `wake_request` event; the event pump stores it as any event and hands it here. It is
//! applied with the limits for wakeups set from inside a box, and the answer (the status
//! and body the public API would give) goes back with `POST /v1/wake/reply`.
//!
//! A request stored just before a daemon crash is not applied after it: `berth-wake` has
//! given up by then (it waits 15 s) and says so.

use axum::response::IntoResponse;
use berth_protocol::harness::GuestEvent;
use berth_protocol::wake::{WakeOp, WakeReply, WakeRequest, WAKE_REQUEST_EVENT};
use berth_protocol::BoxId;
use berth_runtime::{error_chain, GuestClient};
use berth_store::WakeupOrigin;
use http::StatusCode;
use serde_json::{json, Value};

use crate::api::error::ApiError;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::wakeups::{self, view, WakeupList};

/// Largest error body read back from the API's error path.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// `berth-wake ls` shows the soonest this many, each message cut to this many bytes.
const MAX_LISTED: usize = 100;
const MAX_LISTED_MESSAGE_BYTES: usize = 512;

/// Answers the batch's wake requests, in order, on a task of their own (the pump goes on).
pub(crate) fn requests_stored(ctx: &Ctx, id: &BoxId, client: &GuestClient, batch: &[GuestEvent]) {
    let requests: Vec<Value> = batch
        .iter()
        .filter(|e| e.kind == WAKE_REQUEST_EVENT)
        .map(|e| e.data.clone())
        .collect();
    if requests.is_empty() {
        return;
    }
    let (ctx, id, client) = (ctx.clone(), id.clone(), client.clone());
    tokio::spawn(async move {
        for data in requests {
            let request: WakeRequest = match serde_json::from_value(data) {
                Ok(request) => request,
                Err(e) => {
                    tracing::warn!(box_id = %id, error = %e, "wakeups: a malformed wake request from the box; ignored");
                    continue;
                }
            };
            let (status, body) = answer(&ctx, &id, request.op).await;
            let reply = WakeReply {
                request_id: request.request_id,
                status: status.as_u16(),
                body,
            };
            if let Err(e) = client.wake_reply(&reply).await {
                tracing::debug!(box_id = %id, error = %error_chain(&e), "wakeups: cannot answer the box's request");
            }
        }
    });
}

/// What the public API would answer.
async fn answer(ctx: &Ctx, id: &BoxId, op: WakeOp) -> (StatusCode, Value) {
    match apply(ctx, id, op) {
        Ok(answer) => answer,
        Err(e) => {
            let response = ApiError::from(e).into_response();
            let status = response.status();
            let body = axum::body::to_bytes(response.into_body(), MAX_ERROR_BODY)
                .await
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                .unwrap_or(Value::Null);
            (status, body)
        }
    }
}

fn apply(ctx: &Ctx, id: &BoxId, op: WakeOp) -> Result<(StatusCode, Value), OpError> {
    let record = ctx.store.get_box(id)?.ok_or_else(|| OpError::BoxNotFound {
        reference: id.to_string(),
    })?;
    Ok(match op {
        WakeOp::Add { schedule, message } => {
            let made = wakeups::create_for(ctx, &record, &schedule, &message, WakeupOrigin::Box)?;
            (StatusCode::CREATED, json!(view(&made)))
        }
        WakeOp::List => {
            // The answer must fit berth-init's body limit whatever the box holds.
            let wakeups = ctx.store.list_wakeups(id)?;
            let list = WakeupList {
                wakeups: wakeups
                    .iter()
                    .take(MAX_LISTED)
                    .map(|w| {
                        let mut shown = view(w);
                        shown.message = cut(&shown.message, MAX_LISTED_MESSAGE_BYTES);
                        shown
                    })
                    .collect(),
            };
            (StatusCode::OK, json!(list))
        }
        WakeOp::Remove { id: wakeup } => {
            let gone = wakeups::delete_for(ctx, &record, &wakeup)?;
            (StatusCode::OK, json!(view(&gone)))
        }
    })
}

/// `text` cut to at most `max` bytes at a character boundary, marked with `…` when cut.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
