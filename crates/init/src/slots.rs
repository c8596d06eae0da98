//! A cap on how many of one kind of long-lived work (an archive transfer, a watch) run at
//! once. Each holds a thread and descriptors for as long as its client keeps it open; past
//! the cap the call is refused with `429 too_many_requests` instead of spending more.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::ApiError;

pub struct Slots {
    what: &'static str,
    limit: usize,
    active: AtomicUsize,
}

/// One running piece of work; its slot is free again when this is dropped.
pub struct Slot(&'static Slots);

impl Slots {
    pub const fn new(what: &'static str, limit: usize) -> Self {
        Slots {
            what,
            limit,
            active: AtomicUsize::new(0),
        }
    }

    pub fn take(&'static self) -> Result<Slot, ApiError> {
        let taken = self
            .active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            });
        match taken {
            Ok(_) => Ok(Slot(self)),
            Err(_) => Err(ApiError::Busy {
                what: self.what,
                limit: self.limit,
            }),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_set_refuses_until_a_slot_is_dropped() {
        static SLOTS: Slots = Slots::new("things", 2);
        let a = SLOTS.take().unwrap();
        let _b = SLOTS.take().unwrap();
        let err = SLOTS.take().err().unwrap();
        assert_eq!(err.code(), berth_protocol::ErrorCode::TooManyRequests);
        assert_eq!(err.status(), http::StatusCode::TOO_MANY_REQUESTS);
        drop(a);
        assert!(SLOTS.take().is_ok());
    }
}
