//! `GET /metrics`: what an operator's Prometheus scrapes, in its text format (0.0.4,
//! [`exposition`]). docs/metrics.md lists every metric; this is what is measured and why.
//!
//! - **Boxes** ([`boxes`]): how many are in each state, read from the store at each
//!   scrape (the store is where a state is recorded; nothing here can drift from it).
//! - **The lifecycle** ([`lifecycle`]): each box state change, counted and timed at the one
//!   place every change is written (`lifecycle::transition::Transition`), and how long a
//!   call that needed a box waited for it to wake, by rung (cold start, thaw, restore):
//!   the latency a user feels.
//! - **The cluster** ([`cluster`]): the op queue's depth and its oldest op's age, and the
//!   nodes by whether their lease runs, read from the store (0 on one host).
//! - **Durable copies** ([`durable`]): copies uploaded and failed, restores, and the chunk
//!   store's size and last garbage collection.
//! - **Egress** ([`egress`]): bytes through the gateway and its refusals by reason,
//!   counted from the audit records it writes for every decision.
//! - **Streams** ([`streams`]): long-lived streams each tenant holds, against its budget.
//! - **The store** ([`store`]): read and write latency and conflicts, from the store's own
//!   timing, and which database it is.
//! - **The process** ([`process`]): version, start time, file descriptors, memory.
//!
//! Everything counted on a request's path is a few relaxed atomic adds into fixed arrays
//! (no lock, no allocation); everything else is read when scraped. Label values come from
//! closed sets (states, rungs, the gateway's reason codes, capped) or from the store
//! (tenant ids), never from a request. Per-tenant numbers are why `/metrics` needs an
//! admin key (`api/metrics.rs`).

pub mod boxes;
pub mod cluster;
pub mod durable;
pub mod egress;
pub mod exposition;
pub mod lifecycle;
pub mod process;
pub mod store;
pub mod streams;

use std::time::SystemTime;

pub use egress::EgressCounters;
pub use lifecycle::{LifecycleMetrics, WakeFrom};

use berth_store::{Store, StoreError};

use crate::admission::Slots;

/// What the daemon counts as it goes (the rest is read at each scrape).
#[derive(Debug)]
pub struct Metrics {
    pub lifecycle: LifecycleMetrics,
    /// This process's lease renewals (a node's, or an API replica's for its jobs).
    pub leases: cluster::LeaseRenewals,
    /// Durable copies and the chunk store (`[storage] url`).
    pub durable: std::sync::Arc<durable::DurableMetrics>,
    started: SystemTime,
}

impl Metrics {
    /// Counts one renewal of this process's lease, and whether it succeeded.
    pub fn lease_renewed(&self, ok: bool) {
        self.leases.count(ok);
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            lifecycle: LifecycleMetrics::default(),
            leases: Default::default(),
            durable: Default::default(),
            started: SystemTime::now(),
        }
    }
}

impl Metrics {
    /// The whole exposition, as of now: what this process counted, and what `store`,
    /// the gateway's `egress` counters and the tenants' `streams` hold.
    pub fn render(
        &self,
        store: &Store,
        egress: &EgressCounters,
        streams: &Slots,
    ) -> Result<String, StoreError> {
        let mut out = exposition::Exposition::default();
        process::write(&mut out, self.started);
        boxes::write(&mut out, store)?;
        cluster::write(&mut out, store)?;
        self.leases.write(&mut out);
        self.lifecycle.write(&mut out);
        self.durable.write(&mut out);
        egress.write(&mut out);
        streams::write(&mut out, streams);
        // Last: the store's own calls above are in it.
        store::write(&mut out, &store.stats());
        Ok(out.finish())
    }
}
