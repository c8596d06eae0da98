//! In-memory state of boxes: one lifecycle lock per box, the guest client, the pumps
//! (message delivery, event ingestion) and the exit watch of the current boot, and the
//! signals that wake a box's delivery pump and its live event readers. Nothing here is
//! durable; the store is the truth about states (and keeps the boot token, so a restarted
//! daemon can reattach).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use berth_protocol::BoxId;
use berth_runtime::GuestClient;
use berth_store::EventListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::egress::EgressTask;
use crate::lifecycle::ExitWatch;

/// The live part of one box, behind its lifecycle lock.
#[derive(Debug, Default)]
pub struct Live {
    /// The client of the running boot (`None` when the box is not running).
    pub client: Option<GuestClient>,
    /// Counts this daemon's starts of the box: tells a caller whether the boot it talked
    /// to is still the current one.
    pub boot: u64,
    /// The delivery and event pumps of the running boot; dropping them stops them.
    pub pumps: Option<Pumps>,
    /// Serves the box's egress channel for this boot; dropping it closes the channel.
    pub egress: Option<EgressTask>,
    /// Notices this boot ending on its own; dropping it stops watching.
    pub exit_watch: Option<ExitWatch>,
}

impl Live {
    /// The running boot is over (stopped, crashed, deleted): forget its client and stop
    /// its pumps.
    pub fn end_boot(&mut self) {
        self.client = None;
        self.pumps = None;
        self.egress = None;
        self.exit_watch = None;
    }
}

/// The pumps of one boot (`crate::pumps::start` starts them; defined here, with the rest of
/// a boot's live state, so this table needs nothing of the pumps' own). Dropping it aborts
/// their tasks.
#[derive(Debug)]
pub struct Pumps {
    /// Only for a boot that runs a harness.
    pub(crate) delivery: Option<JoinHandle<()>>,
    pub(crate) events: JoinHandle<()>,
}

impl Drop for Pumps {
    fn drop(&mut self) {
        if let Some(delivery) = &self.delivery {
            delivery.abort();
        }
        self.events.abort();
    }
}

/// One box's lifecycle lock. Start, stop, resume and delete take it for their whole
/// duration, so concurrent wakes start a box once: the second caller finds it running.
#[derive(Debug)]
pub struct BoxSlot {
    /// Shared so a transition can hold it while it runs (`lifecycle::transition`).
    pub lifecycle: Arc<tokio::sync::Mutex<Live>>,
    /// Wakes the delivery pump: a message was stored.
    pub delivery: Notify,
    /// The newest stored event seq, for live readers (SSE).
    pub events: watch::Sender<u64>,
}

impl Default for BoxSlot {
    fn default() -> Self {
        BoxSlot {
            lifecycle: Default::default(),
            delivery: Notify::new(),
            events: watch::Sender::new(0),
        }
    }
}

#[derive(Debug)]
pub struct BoxTable {
    slots: Mutex<HashMap<BoxId, Arc<BoxSlot>>>,
    /// Turns `true` when the daemon shuts down: open event streams end.
    closing: watch::Sender<bool>,
}

impl Default for BoxTable {
    fn default() -> Self {
        BoxTable {
            slots: Mutex::default(),
            closing: watch::Sender::new(false),
        }
    }
}

impl BoxTable {
    /// Ends every open event stream (daemon shutdown): a graceful shutdown waits for open
    /// connections, and a live stream would never end on its own.
    pub fn close_streams(&self) {
        self.closing.send_replace(true);
    }

    /// Resolves once [`BoxTable::close_streams`] was called.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    /// The slot of `id`, created on first use.
    pub fn slot(&self, id: &BoxId) -> Arc<BoxSlot> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(id.clone()).or_default().clone()
    }

    /// The slot of `id` if something created it.
    pub fn existing(&self, id: &BoxId) -> Option<Arc<BoxSlot>> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.get(id).cloned()
    }

    /// Drops the slot of a deleted box.
    pub fn forget(&self, id: &BoxId) {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// The store tells the table about every event it appended; live readers of the box wake.
impl EventListener for BoxTable {
    fn appended(&self, box_id: &BoxId, last_seq: u64) {
        if let Some(slot) = self.existing(box_id) {
            slot.events.send_if_modified(|seq| {
                let newer = last_seq > *seq;
                if newer {
                    *seq = last_seq;
                }
                newer
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_box_gets_the_same_lock() {
        let table = BoxTable::default();
        let id = BoxId::from_random([1; 20]);
        assert!(Arc::ptr_eq(&table.slot(&id), &table.slot(&id)));
        let other = BoxId::from_random([2; 20]);
        assert!(!Arc::ptr_eq(&table.slot(&id), &table.slot(&other)));
        let before = table.slot(&id);
        table.forget(&id);
        assert!(!Arc::ptr_eq(&before, &table.slot(&id)));
    }
}
