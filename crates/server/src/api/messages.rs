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
pub struct PostBody {
    content: String,
    #[serde(default)]
    id: Option<String>,
}

#[derive(Debug, Serialize)]
struct PostedView {
    id: String,
    seq: u64,
}

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

#[derive(Debug, Serialize)]
struct MessageView {
    id: String,
    seq: u64,
    content: String,
    state: &'static str,
    created_at: String,
    delivered_at: Option<String>,
}

#[derive(Debug, Serialize)]
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
