//! The term the cluster's singleton jobs write under in this process (`cluster::jobs`
//! takes and renews the lease; every write a job makes that another holder could also make
//! checks this term in its own transaction).

use std::sync::Mutex;

use berth_store::Fence;

/// The term this process's jobs write under.
#[derive(Debug, Default)]
pub struct JobsTerm {
    /// The last term this process held: kept after the lease is lost, so a write still in
    /// flight is checked against it (and refused), never made unchecked.
    fence: Mutex<Option<Fence>>,
}

impl JobsTerm {
    /// What a job's writes are checked against; `None` on one host (nothing to check).
    pub fn fence(&self) -> Option<Fence> {
        self.fence.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn hold(&self, fence: Fence) {
        *self.fence.lock().unwrap_or_else(|p| p.into_inner()) = Some(fence);
    }
}
