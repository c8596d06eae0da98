//! `GET /v1/boxes/{ref}/events`: the box's stored events after a seq, and a live feed of
//! the ones stored later. Pages are bounded by bytes as well as by count, and a tenant
//! holds a bounded number of live feeds.

use berth_protocol::{BoxId, TenantId};
use berth_store::{EventPage, PageLimit};
use tokio::sync::watch;

use crate::admission::Slot;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ops::box_find::find_box;

/// Largest page (JSON, and each store read of a live stream): 1000 events, and beyond the
/// first event 4 MiB of event data, so one page of 1 MiB events is a few MiB, not a GiB.
pub const PAGE: PageLimit = PageLimit {
    events: 1000,
    bytes: 4 << 20,
};

/// Stored events with `seq > after`: as many as [`PAGE`] holds, whether there is more, and
/// the gap when some of them were pruned.
pub fn read_page(
    ctx: &Ctx,
    tenant: &TenantId,
    reference: &str,
    after: u64,
) -> Result<EventPage, OpError> {
    let record = find_box(ctx, tenant, reference)?;
    Ok(ctx.store.read_events(&record.id, after, PAGE)?)
}

/// Where the page after `page` starts, for a reader that asked from `after`.
pub fn next_after(page: &EventPage, after: u64) -> u64 {
    let past_gap = page.gap.map_or(after, |gap| gap.last);
    page.events.last().map_or(past_gap, |e| e.seq)
}

/// A reader of one box's event log from `after` on: stored events first, then each new
/// one as it is stored. Holds one of its tenant's stream slots while it lives.
pub struct EventFeed {
    ctx: Ctx,
    pub id: BoxId,
    after: u64,
    changed: watch::Receiver<u64>,
    closing: watch::Receiver<bool>,
    _slot: Slot,
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
        let slot = ctx.streams.take(tenant)?;
        let changed = ctx.boxes.slot(&record.id).events.subscribe();
        Ok(EventFeed {
            ctx: ctx.clone(),
            id: record.id,
            after,
            changed,
            closing: ctx.boxes.closing(),
            _slot: slot,
        })
    }

    /// The next page after the last one returned (with its gap if events the reader had
    /// not seen were pruned meanwhile), waiting for new events if there are none;
    /// `Ok(None)` when the box is gone or the daemon shuts down.
    pub async fn next(&mut self) -> Result<Option<EventPage>, OpError> {
        loop {
            if *self.closing.borrow() {
                return Ok(None);
            }
            let page = self.ctx.store.read_events(&self.id, self.after, PAGE)?;
            if !page.events.is_empty() || page.gap.is_some() {
                self.after = next_after(&page, self.after);
                return Ok(Some(page));
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
