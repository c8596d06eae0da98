//! A histogram of durations with fixed buckets, counted with atomics: observing one is a
//! few relaxed atomic adds, no lock, no allocation. What `/metrics` shows as a Prometheus
//! histogram (the store's call latency, the lifecycle's transitions and wakes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Debug)]
pub struct Histogram {
    /// Upper bounds of the buckets in seconds (Prometheus' `le`), rising.
    bounds_s: &'static [f64],
    /// Observations per bucket (not cumulative), then one for everything above the last.
    counts: Box<[AtomicU64]>,
    sum_us: AtomicU64,
}

/// A histogram as read at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    pub bounds_s: &'static [f64],
    /// Cumulative: one per bound, and a last for `+Inf` (every observation).
    pub cumulative: Vec<u64>,
    pub sum: Duration,
}

impl Histogram {
    pub fn new(bounds_s: &'static [f64]) -> Histogram {
        Histogram {
            bounds_s,
            counts: (0..=bounds_s.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = self
            .bounds_s
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(self.bounds_s.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    /// Observations so far. Read bucket by bucket while others may observe: the buckets
    /// are cumulative by construction, and `+Inf` is their total.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let cumulative = self
            .counts
            .iter()
            .map(|count| {
                total += count.load(Ordering::Relaxed);
                total
            })
            .collect();
        HistogramSnapshot {
            bounds_s: self.bounds_s,
            cumulative,
            sum: Duration::from_micros(self.sum_us.load(Ordering::Relaxed)),
        }
    }
}

impl HistogramSnapshot {
    /// Every observation.
    pub fn count(&self) -> u64 {
        self.cumulative.last().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: [f64; 4] = [0.001, 0.25, 0.5, 60.0];

    #[test]
    fn an_observation_counts_in_its_bucket_and_every_one_above() {
        let h = Histogram::new(&BOUNDS);
        h.observe(Duration::from_micros(900));
        h.observe(Duration::from_millis(300));
        h.observe(Duration::from_secs(61));
        let s = h.snapshot();
        assert_eq!(s.count(), 3);
        assert_eq!(s.cumulative, vec![1, 1, 2, 2, 3]);
        assert_eq!(s.sum, Duration::from_micros(61_300_900));
        assert_eq!(s.bounds_s, &BOUNDS);
    }
}
