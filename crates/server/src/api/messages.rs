//! `/v1/boxes/{ref}/messages`: post a message to the box's agent, list them.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use berth_store::MessageRecord;
use http::StatusCode;
use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, ApiQuery};
use crate::ctx::Ctx;
use crate::ops::{message_list, message_post};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
pub struct PostBody {
    content: String,
    #[serde(default)]
    id: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct PostedView {
    id: String,
    seq: u64,
    /// The box's newest event seq when the message was first stored: its turn's events
    /// (the `result` carrying this message's `message_id` among them) come after it, so
    /// follow `GET …/events?after=events_after`. The same on an idempotent repost; absent
    /// for a message stored by a berth from before this field.
    #[serde(skip_serializing_if = "Option::is_none")]
    events_after: Option<u64>,
}

#[utoipa::path(post, path = "/v1/boxes/{box_ref}/messages", tag = "messages", summary = "Send a message to the box's agent (stored before the answer; wakes the box)", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name")), request_body = PostBody, responses((status = 202, body = PostedView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody), (status = 413, description = "content over 256 KiB", body = berth_protocol::ErrorBody), (status = 409, description = "the id was used with other content", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn post(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(box_ref): Path<String>,
    ApiJson(body): ApiJson<PostBody>,
) -> Result<Response, ApiError> {
    let posted = message_post::post_message(
        &ctx,
        &who.tenant_id,
        &box_ref,
        message_post::PostMessage {
            id: body.id,
            content: body.content,
        },
    )?;
    let view = PostedView {
        id: posted.id.to_string(),
        seq: posted.seq,
        events_after: posted.events_after,
    };
    Ok((StatusCode::ACCEPTED, Json(view)).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    after: u64,
    #[serde(default)]
    limit: Option<u32>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct MessageView {
    id: String,
    seq: u64,
    content: String,
    state: &'static str,
    created_at: String,
    delivered_at: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
struct MessageListView {
    messages: Vec<MessageView>,
}

impl From<MessageRecord> for MessageView {
    fn from(m: MessageRecord) -> Self {
        MessageView {
            id: m.id.to_string(),
            seq: m.seq,
            content: m.content,
            state: m.state.as_str(),
            created_at: m.created_at.format(&Rfc3339).unwrap_or_default(),
            delivered_at: m.delivered_at.and_then(|t| t.format(&Rfc3339).ok()),
        }
    }
}

#[utoipa::path(get, path = "/v1/boxes/{box_ref}/messages", tag = "messages", summary = "List messages with their delivery state", params(("box_ref" = String, Path, description = "box id (`bx_…`) or name"), ("after" = Option<u64>, Query, description = "only seq > after"), ("limit" = Option<u32>, Query, description = "at most 1000")), responses((status = 200, body = MessageListView), (status = 400, description = "invalid request", body = berth_protocol::ErrorBody), (status = 401, description = "no valid API key", body = berth_protocol::ErrorBody), (status = 404, description = "no such box", body = berth_protocol::ErrorBody)), security(("api_key" = [])))]
pub async fn list(
    State(ctx): State<Ctx>,
    Caller(who): Caller,
    Path(box_ref): Path<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Response, ApiError> {
    let messages = message_list::list_messages(&ctx, &who.tenant_id, &box_ref, q.after, q.limit)?;
    let view = MessageListView {
        messages: messages.into_iter().map(MessageView::from).collect(),
    };
    Ok(Json(view).into_response())
}
