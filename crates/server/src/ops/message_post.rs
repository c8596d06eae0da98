//! `POST /v1/boxes/{ref}/messages`: store the message (committed and fsync'd before the
//! answer), then wake the box in the background and nudge its delivery pump.

use berth_protocol::TenantId;
use berth_store::{MessageId, Posted};

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_find::find_box;
use crate::ops::box_start::ensure_running;
use berth_runtime::error_chain;

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
    wake(ctx, &record.id);
    Ok(posted)
}

/// Starts the box if it sleeps and tells a running delivery pump to look at the queue,
/// without making the caller wait for either.
pub(crate) fn wake(ctx: &Ctx, id: &berth_protocol::BoxId) {
    ctx.boxes.slot(id).delivery.notify_one();
    // One wake per post: they queue on the box's lifecycle lock, and each after the first
    // finds the box running (a wake racing a stop still leaves the box running after).
    let (ctx, id) = (ctx.clone(), id.clone());
    tokio::spawn(async move {
        if let Err(e) = ensure_running(&ctx, &id).await {
            tracing::warn!(box_id = %id, error = %error_chain(&e), "cannot wake the box for its messages");
        }
    });
}
