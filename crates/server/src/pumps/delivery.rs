//! The delivery pump: sends the box's queued messages to its harness one at a time, in seq
//! order, and marks each delivered once `berth-init` has answered (a `duplicate` answer
//! means an earlier try got there: delivered too). A failed or timed-out try is repeated
//! with backoff: `berth-init` deduplicates by message id, so repeating is safe. When the
//! box cannot be reached, the lifecycle's owner is told (`wake_if_dead`: recorded stopped
//! and woken again if its processes are gone, which starts a fresh pump).

use std::time::Duration;

use berth_protocol::harness::DeliverRequest;
use berth_protocol::BoxId;
use berth_runtime::{GuestClient, GuestError};
use berth_store::MessageRecord;

use crate::ctx::Ctx;
use crate::pumps::Backoff;
use berth_runtime::error_chain;

/// How long one delivery may take (the harness may be busy with a long turn before it
/// reads the next line); after that it is tried again.
const DELIVER_TIMEOUT: Duration = Duration::from_secs(60);

pub(crate) async fn run(ctx: Ctx, id: BoxId, client: GuestClient, boot: u64) {
    let slot = ctx.boxes.slot(&id);
    let mut backoff = Backoff::new();
    loop {
        let message = match ctx.store.next_undelivered(&id) {
            Ok(Some(message)) => message,
            Ok(None) => {
                // A post after the check above left a permit: no wake-up is lost.
                slot.delivery.notified().await;
                continue;
            }
            Err(e) => {
                tracing::error!(box_id = %id, error = %error_chain(&e), "delivery: cannot read the queue");
                backoff.wait().await;
                continue;
            }
        };
        // A message on its way keeps the box from being reclaimed as idle.
        let _busy = ctx.activity.begin(&id);
        match deliver(&client, &message).await {
            Ok(duplicate) => {
                if let Err(e) = ctx.store.mark_delivered(&id, &message.id) {
                    tracing::error!(box_id = %id, error = %error_chain(&e), "delivery: cannot mark a message delivered");
                    backoff.wait().await;
                    continue;
                }
                tracing::debug!(box_id = %id, seq = message.seq, duplicate, "message delivered");
                backoff.reset();
            }
            Err(Failure::Guest(GuestError::Connect { .. })) => {
                tracing::warn!(box_id = %id, seq = message.seq, "delivery: the box's agent cannot be reached");
                ctx.lifecycle().wake_if_dead(&id, boot);
                backoff.wait().await;
            }
            Err(failure) => {
                tracing::warn!(box_id = %id, seq = message.seq, error = %failure, "delivery failed; retrying");
                backoff.wait().await;
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Guest(GuestError),
    #[error("no answer within {}s", DELIVER_TIMEOUT.as_secs())]
    Timeout,
}

/// Hands the message over; `Ok(true)` when the box already had it.
async fn deliver(client: &GuestClient, message: &MessageRecord) -> Result<bool, Failure> {
    let request = DeliverRequest {
        id: message.id.as_str().to_owned(),
        content: message.content.clone(),
    };
    match tokio::time::timeout(DELIVER_TIMEOUT, client.deliver(&request)).await {
        Ok(Ok(answer)) => Ok(answer.duplicate),
        Ok(Err(e)) => Err(Failure::Guest(e)),
        Err(_) => Err(Failure::Timeout),
    }
}
