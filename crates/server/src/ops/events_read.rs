//! `GET /v1/boxes/{ref}/events`: the box's stored events after a seq, and a live feed of
//! the ones stored later.

use berth_protocol::{BoxId, TenantId};
use berth_store::EventRecord;
use tokio::sync::watch;

use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_find::find_box;

/// Largest page (JSON, and each store read of a live stream).
pub const PAGE: u32 = 1000;

/// A page of stored events with `seq > after`; `next_after` is where the next page starts.
#[derive(Debug)]
pub struct EventPage {
    pub events: Vec<EventRecord>,
    pub next_after: u64,
}

pub fn read_page(
    ctx: &Ctx,
    tenant: &TenantId,
    reference: &str,
    after: u64,
) -> Result<EventPage, OpError> {
    let record = find_box(ctx, tenant, reference)?;
    page(ctx, &record.id, after)
}

fn page(ctx: &Ctx, id: &BoxId, after: u64) -> Result<EventPage, OpError> {
    let events = ctx.store.read_events(id, after, PAGE)?;
    let next_after = events.last().map_or(after, |e| e.seq);
    Ok(EventPage { events, next_after })
}

/// A reader of one box's event log from `after` on: stored events first, then each new
/// one as it is stored.
pub struct EventFeed {
    ctx: Ctx,
    pub id: BoxId,
    after: u64,
    changed: watch::Receiver<u64>,
    closing: watch::Receiver<bool>,
}

impl EventFeed {
    /// Subscribes before the first read, so nothing stored meanwhile is missed.
    pub fn open(
        ctx: &Ctx,
        tenant: &TenantId,
        reference: &str,
        after: u64,
    ) -> Result<EventFeed, OpError> {
        let record = find_box(ctx, tenant, reference)?;
        let changed = ctx.boxes.slot(&record.id).events.subscribe();
        Ok(EventFeed {
            ctx: ctx.clone(),
            id: record.id,
            after,
            changed,
            closing: ctx.boxes.closing(),
        })
    }

    /// The next events after the last ones returned, waiting for new ones if there are
    /// none; `Ok(None)` when the box is gone or the daemon shuts down.
    pub async fn next(&mut self) -> Result<Option<Vec<EventRecord>>, OpError> {
        loop {
            if *self.closing.borrow() {
                return Ok(None);
            }
            let page = page(&self.ctx, &self.id, self.after)?;
            if !page.events.is_empty() {
                self.after = page.next_after;
                return Ok(Some(page.events));
            }
            tokio::select! {
                changed = self.changed.changed() => if changed.is_err() {
                    // The box's slot was dropped: the box was deleted.
                    return Ok(None);
                },
                _ = self.closing.wait_for(|closing| *closing) => return Ok(None),
            }
        }
    }
}
