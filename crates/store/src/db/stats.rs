//! How long the store's calls take, for `/metrics`: a histogram per kind of call.

use berth_basics::{Histogram, HistogramSnapshot};

/// Upper bounds of the buckets, in seconds: from a cached read (100 µs) to a write that
/// waited out a busy database (1 s).
pub const BUCKETS_S: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// The store's calls since it opened.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreStats {
    /// `sqlite` or `postgres`.
    pub backend: &'static str,
    /// Write transactions, from the wait for the connection to the commit.
    pub writes: HistogramSnapshot,
    /// Reads, likewise.
    pub reads: HistogramSnapshot,
    /// Write transactions run again after a conflict with a concurrent one (Postgres).
    pub conflicts: u64,
}

pub(crate) struct Stats {
    pub(crate) writes: Histogram,
    pub(crate) reads: Histogram,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            writes: Histogram::new(&BUCKETS_S),
            reads: Histogram::new(&BUCKETS_S),
        }
    }
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
