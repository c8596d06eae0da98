//! Guest CIDs: one per running VM, unique on this host, from 3 up (0–2 are the
//! hypervisor, local and host addresses; `u32::MAX` is `VMADDR_CID_ANY`).
//!
//! With one vhost-device-vsock per VM a CID is only seen by its own guest and backend, so
//! clashes would be harmless today; unique CIDs keep that true for a shared backend or a
//! kernel vhost-vsock, where they are not.

use std::collections::BTreeSet;
use std::sync::Mutex;

pub const FIRST_CID: u32 = 3;
const LAST_CID: u32 = u32::MAX - 1;

#[derive(Debug, Default)]
pub struct CidAllocator {
    used: Mutex<BTreeSet<u32>>,
}

impl CidAllocator {
    /// The lowest free CID, now taken; `None` when all four billion are.
    pub fn allocate(&self) -> Option<u32> {
        let mut used = self.lock();
        let mut candidate = FIRST_CID;
        // `used` is sorted: the first gap is the lowest free CID.
        for &cid in used.range(FIRST_CID..) {
            if cid != candidate {
                break;
            }
            candidate = candidate.checked_add(1)?;
        }
        (candidate <= LAST_CID).then(|| {
            used.insert(candidate);
            candidate
        })
    }

    /// Marks `cid` as taken (a VM left running by a previous daemon). `false` if it was.
    pub fn claim(&self, cid: u32) -> bool {
        (FIRST_CID..=LAST_CID).contains(&cid) && self.lock().insert(cid)
    }

    pub fn release(&self, cid: u32) {
        self.lock().remove(&cid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        // A panic while holding the lock leaves a valid set: keep using it.
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cids_are_unique_from_3_and_reused_after_release() {
        let cids = CidAllocator::default();
        assert_eq!(
            [cids.allocate(), cids.allocate(), cids.allocate()],
            [Some(3), Some(4), Some(5)]
        );
        cids.release(4);
        assert_eq!(cids.allocate(), Some(4));
        assert_eq!(cids.allocate(), Some(6));
    }

    #[test]
    fn claimed_cids_are_skipped_and_reserved_ones_refused() {
        let cids = CidAllocator::default();
        assert!(cids.claim(3));
        assert!(!cids.claim(3));
        assert!(cids.claim(5));
        for reserved in [0, 1, 2, u32::MAX] {
            assert!(!cids.claim(reserved));
        }
        assert_eq!(cids.allocate(), Some(4));
        assert_eq!(cids.allocate(), Some(6));
    }

    #[test]
    fn concurrent_allocations_never_collide() {
        let cids = std::sync::Arc::new(CidAllocator::default());
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let cids = cids.clone();
                std::thread::spawn(move || {
                    (0..100)
                        .map(|_| cids.allocate().unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u32> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 800);
        assert_eq!((all[0], all[799]), (3, 802));
    }
}
