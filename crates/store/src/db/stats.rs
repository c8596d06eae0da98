//! How long the store's calls take, for `/metrics`: a fixed-bucket histogram per kind of
//! call, counted with atomics (no lock on the path of every call).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds (Prometheus' `le`), the last one `+Inf`.
pub const BUCKETS_US: [u64; 12] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
];

#[derive(Default)]
pub(crate) struct Histogram {
    /// Per bucket of [`BUCKETS_US`], then one for everything above the last bound.
    counts: [AtomicU64; BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub(crate) fn record(&self, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = BUCKETS_US
            .iter()
            .position(|bound| us <= *bound)
            .unwrap_or(BUCKETS_US.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    fn snapshot(&self) -> Latency {
        let mut cumulative = Vec::with_capacity(BUCKETS_US.len() + 1);
        let mut total = 0;
        for count in &self.counts {
            total += count.load(Ordering::Relaxed);
            cumulative.push(total);
        }
        Latency {
            cumulative,
            count: total,
            sum: Duration::from_micros(self.sum_us.load(Ordering::Relaxed)),
        }
    }
}

/// A histogram as Prometheus shows one: `cumulative[i]` calls took at most
/// `BUCKETS_US[i]` µs (the last entry, `+Inf`, is `count`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latency {
    pub cumulative: Vec<u64>,
    pub count: u64,
    pub sum: Duration,
}

/// The store's calls since it opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreStats {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Write transactions, from the wait for the connection to the commit.
    pub writes: Latency,
    /// Reads, likewise.
    pub reads: Latency,
    /// Write transactions run again after a conflict with a concurrent one (Postgres).
    pub conflicts: u64,
}

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) writes: Histogram,
    pub(crate) reads: Histogram,
}

impl Stats {
    pub(crate) fn snapshot(&self, backend: &'static str, conflicts: u64) -> StoreStats {
        StoreStats {
            backend,
            writes: self.writes.snapshot(),
            reads: self.reads.snapshot(),
            conflicts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_counts_in_its_bucket_and_every_one_above() {
        let h = Histogram::default();
        h.record(Duration::from_micros(90));
        h.record(Duration::from_micros(3_000));
        h.record(Duration::from_secs(5));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.cumulative[0], 1, "≤100 µs");
        assert_eq!(s.cumulative[4], 1, "≤2.5 ms");
        assert_eq!(s.cumulative[5], 2, "≤5 ms");
        assert_eq!(s.cumulative[BUCKETS_US.len() - 1], 2, "≤1 s");
        assert_eq!(*s.cumulative.last().unwrap(), 3, "+Inf");
        assert_eq!(s.sum, Duration::from_micros(5_003_090));
    }
}
