//! The event pump: reads the box's guest event journal from the stored cursor and stores
//! each batch (with the new cursor, in one transaction); reconnects from the cursor after
//! any break. Storing wakes live readers through the store's event listener.

use berth_protocol::harness::GuestEvent;
use berth_protocol::BoxId;
use berth_runtime::GuestClient;
use futures_util::FutureExt;

use crate::ctx::Ctx;
use crate::pumps::Backoff;
use berth_runtime::error_chain;

/// Most events stored in one transaction.
const MAX_BATCH: usize = 256;

pub(crate) async fn run(ctx: Ctx, id: BoxId, client: GuestClient) {
    let mut backoff = Backoff::new();
    loop {
        match pump(&ctx, &id, &client, &mut backoff).await {
            Ok(()) => tracing::debug!(box_id = %id, "events: the stream ended; reconnecting"),
            Err(e) => {
                tracing::debug!(box_id = %id, error = %e, "events: stream broken; reconnecting")
            }
        }
        backoff.wait().await;
    }
}

#[derive(Debug, thiserror::Error)]
enum PumpError {
    #[error(transparent)]
    Guest(#[from] berth_runtime::GuestError),
    #[error("{}", error_chain(.0))]
    Store(#[from] berth_store::StoreError),
}

/// One connection: every event after the stored cursor, stored as it comes.
async fn pump(
    ctx: &Ctx,
    id: &BoxId,
    client: &GuestClient,
    backoff: &mut Backoff,
) -> Result<(), PumpError> {
    let cursor = ctx.store.event_cursor(id)?;
    let mut stream = client.events(cursor).await?;
    loop {
        let Some(first) = stream.next_frame().await? else {
            return Ok(());
        };
        let mut batch: Vec<GuestEvent> = vec![first];
        let mut end = None;
        // Whatever has already arrived goes into the same transaction (one fsync).
        while batch.len() < MAX_BATCH {
            match stream.next_frame().now_or_never() {
                Some(Ok(Some(event))) => batch.push(event),
                Some(Ok(None)) => {
                    end = Some(Ok(()));
                    break;
                }
                Some(Err(e)) => {
                    end = Some(Err(e.into()));
                    break;
                }
                None => break,
            }
        }
        let appended = ctx.store.append_guest_events(id, &batch)?;
        ctx.event_pruner.stored(appended.kept_bytes);
        crate::push::trigger::events_stored(ctx, id, &batch);
        crate::lifecycle::wakeups::relay::requests_stored(ctx, id, client, &batch);
        backoff.reset();
        if let Some(failed) = batch.iter().find(|e| e.kind == "harness_failed") {
            give_up(ctx, id, failed);
        }
        if let Some(end) = end {
            return end;
        }
    }
}

/// The harness gave up: fail the box, from a task of its own (stopping the box ends this
/// pump).
fn give_up(ctx: &Ctx, id: &BoxId, event: &GuestEvent) {
    let why = event.data["reason"].as_str().unwrap_or("it kept exiting");
    let reason = format!("the harness gave up: {why}");
    let (ctx, id) = (ctx.clone(), id.clone());
    tokio::spawn(async move {
        if let Err(e) = ctx.lifecycle().fail(&id, &reason).await {
            tracing::error!(box_id = %id, error = %error_chain(&e), "cannot fail the box of a failed harness");
        }
    });
}
