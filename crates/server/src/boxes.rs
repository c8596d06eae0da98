//! In-memory state of boxes: one lifecycle lock per box and the guest client of the
//! current boot. Nothing here is durable; the store is the truth about states, and the
//! daemon stops every box at start (reconcile) because boot tokens live only here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use berth_protocol::BoxId;
use berth_runtime::GuestClient;

/// The live part of one box, behind its lifecycle lock.
#[derive(Debug, Default)]
pub struct Live {
    /// The client of the running boot (`None` when the box is not running).
    pub client: Option<GuestClient>,
    /// Counts this daemon's starts of the box: tells a caller whether the boot it talked
    /// to is still the current one.
    pub boot: u64,
}

/// One box's lifecycle lock. Start, stop, resume and delete take it for their whole
/// duration, so concurrent wakes start a box once: the second caller finds it running.
#[derive(Debug, Default)]
pub struct BoxSlot {
    pub lifecycle: tokio::sync::Mutex<Live>,
}

#[derive(Debug, Default)]
pub struct BoxTable {
    slots: Mutex<HashMap<BoxId, Arc<BoxSlot>>>,
}

impl BoxTable {
    /// The slot of `id`, created on first use.
    pub fn slot(&self, id: &BoxId) -> Arc<BoxSlot> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(id.clone()).or_default().clone()
    }

    /// Drops the slot of a deleted box.
    pub fn forget(&self, id: &BoxId) {
        self.slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
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
