//! `POST /v1/boxes/{ref}/messages`: store the message (committed and fsync'd before the
//! answer), then wake the box in the background and nudge its delivery pump.

use berth_protocol::TenantId;
use berth_store::{MessageId, Posted};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_find::find_box;

/// Largest message content.
pub const MAX_CONTENT_BYTES: usize = 256 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostMessage {
    /// The client's idempotency key, if it chose one.
    pub id: Option<String>,
    pub content: String,
}

pub fn post_message(
    ctx: &Ctx,
    tenant: &TenantId,
    reference: &str,
    req: PostMessage,
) -> Result<Posted, OpError> {
    let record = find_box(ctx, tenant, reference)?;
    if req.content.len() > MAX_CONTENT_BYTES {
        return Err(OpError::MessageTooLarge {
            limit_bytes: MAX_CONTENT_BYTES as u64,
        });
    }
    let id = req
        .id
        .as_deref()
        .map(MessageId::from_key)
        .transpose()
        .map_err(OpError::InvalidMessageId)?;
    if !ctx.box_has_harness(&record) {
        return Err(OpError::NoHarness { name: record.name });
    }
    let posted = ctx
        .store
        .post_message(&record.id, id.as_ref(), &req.content)?;
    if posted.created {
        tracing::debug!(box_id = %record.id, seq = posted.seq, "message accepted");
    }
    ctx.lifecycle().wake_for_messages(&record.id);
    Ok(posted)
}
