//! Percentiles of a set of timings.

use std::time::Duration;

/// p50 and p99 of `samples` (nearest-rank).
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub p50: Duration,
    pub p99: Duration,
    pub n: usize,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        assert!(!samples.is_empty(), "no samples");
        let mut sorted = samples.to_vec();
        sorted.sort();
        let rank = |p: f64| {
            let i = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
            sorted[i.clamp(1, sorted.len()) - 1]
        };
        Summary {
            p50: rank(50.0),
            p99: rank(99.0),
            n: sorted.len(),
        }
    }
}

/// `value / floor` as a ratio.
pub fn ratio(value: Duration, floor: Duration) -> f64 {
    value.as_secs_f64() / floor.as_secs_f64().max(1e-9)
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Summary::of(&samples);
        assert_eq!(s.p50, Duration::from_millis(50));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(
            Summary::of(&[Duration::from_millis(3)]).p99,
            Duration::from_millis(3)
        );
    }
}
