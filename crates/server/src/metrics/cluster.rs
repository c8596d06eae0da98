//! The cluster's work queue and its nodes, read from the store at each scrape: ops queued
//! for nodes and not yet claimed, claimed and not yet finished, how long the oldest has
//! waited, and the nodes by whether their lease runs. On one host every value is 0.

use std::sync::atomic::{AtomicU64, Ordering};

use berth_store::{OpQueue, Store, StoreError};

use super::exposition::{Exposition, Kind};

pub(super) fn write(out: &mut Exposition, store: &Store) -> Result<(), StoreError> {
    let queue = store.op_queue()?;
    let nodes = store.list_nodes()?;
    let live = nodes.iter().filter(|n| n.live).count() as u64;
    write_values(out, &queue, live, nodes.len() as u64 - live);
    Ok(())
}

/// Lease renewals this process made, by outcome: a node renews its own every 2 s, an API
/// replica the lease of the cluster's singleton jobs. Failures rising is a database (or a
/// network) going away before the lease does.
#[derive(Debug, Default)]
pub struct LeaseRenewals {
    ok: AtomicU64,
    failed: AtomicU64,
}

impl LeaseRenewals {
    pub fn count(&self, ok: bool) {
        let counter = if ok { &self.ok } else { &self.failed };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn write(&self, out: &mut Exposition) {
        out.family(
            "berth_lease_renewals_total",
            Kind::Counter,
            "Lease renewals by this process, by outcome (a node's own lease; a replica's jobs lease).",
        );
        out.sample(
            "berth_lease_renewals_total",
            &[("outcome", "ok")],
            self.ok.load(Ordering::Relaxed),
        );
        out.sample(
            "berth_lease_renewals_total",
            &[("outcome", "failed")],
            self.failed.load(Ordering::Relaxed),
        );
    }
}

fn write_values(out: &mut Exposition, queue: &OpQueue, live: u64, gone: u64) {
    out.family(
        "berth_ops",
        Kind::Gauge,
        "Operations for nodes, by state: queued (not yet claimed) or claimed (under way).",
    );
    out.sample("berth_ops", &[("state", "queued")], queue.queued);
    out.sample("berth_ops", &[("state", "claimed")], queue.claimed);
    out.family(
        "berth_ops_oldest_queued_seconds",
        Kind::Gauge,
        "How long the oldest queued operation has waited to be claimed (0: none waits).",
    );
    let oldest_s = queue.oldest_queued_ms.unwrap_or(0).max(0) as f64 / 1000.0;
    out.sample_f64("berth_ops_oldest_queued_seconds", &[], oldest_s);
    out.family(
        "berth_nodes",
        Kind::Gauge,
        "Registered nodes, by whether their lease still runs (live) or ran out (gone).",
    );
    out.sample("berth_nodes", &[("lease", "live")], live);
    out.sample("berth_nodes", &[("lease", "gone")], gone);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_and_the_nodes_are_shown() {
        let queue = OpQueue {
            queued: 3,
            claimed: 1,
            oldest_queued_ms: Some(1500),
        };
        let mut out = Exposition::default();
        write_values(&mut out, &queue, 2, 1);
        let text = out.finish();
        for line in [
            r#"berth_ops{state="queued"} 3"#,
            r#"berth_ops{state="claimed"} 1"#,
            "berth_ops_oldest_queued_seconds 1.5",
            r#"berth_nodes{lease="live"} 2"#,
            r#"berth_nodes{lease="gone"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
