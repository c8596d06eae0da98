//! The store's latency, from `Store::stats()`: the store times every read and write
//! transaction (from the wait for a connection to the commit).

use berth_store::StoreStats;

use super::exposition::{Exposition, Kind};

pub(super) fn write(out: &mut Exposition, stats: &StoreStats) {
    out.family(
        "berth_store_info",
        Kind::Gauge,
        "The database the store runs on (always 1).",
    );
    out.sample("berth_store_info", &[("backend", stats.backend)], 1);
    out.family(
        "berth_store_seconds",
        Kind::Histogram,
        "How long the store's calls took, from the wait for a connection to the commit, by kind (read or write).",
    );
    for (kind, latency) in [("read", &stats.reads), ("write", &stats.writes)] {
        out.histogram("berth_store_seconds", &[("kind", kind)], latency);
    }
    out.family(
        "berth_store_conflicts_total",
        Kind::Counter,
        "Write transactions run again after a conflict with a concurrent one (PostgreSQL).",
    );
    out.sample("berth_store_conflicts_total", &[], stats.conflicts);
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use berth_basics::HistogramSnapshot;

    use super::*;

    #[test]
    fn both_kinds_and_the_conflicts_are_shown() {
        let latency = HistogramSnapshot {
            bounds_s: &[0.0001, 0.00025, 1.0],
            cumulative: vec![0, 2, 2, 3],
            sum: Duration::from_micros(2_000_300),
        };
        let stats = StoreStats {
            backend: "sqlite",
            writes: latency.clone(),
            reads: latency,
            conflicts: 0,
        };
        let mut out = Exposition::default();
        write(&mut out, &stats);
        let text = out.finish();
        for line in [
            r#"berth_store_info{backend="sqlite"} 1"#,
            r#"berth_store_seconds_bucket{kind="read",le="0.0001"} 0"#,
            r#"berth_store_seconds_bucket{kind="read",le="0.00025"} 2"#,
            r#"berth_store_seconds_bucket{kind="write",le="1"} 2"#,
            r#"berth_store_seconds_bucket{kind="write",le="+Inf"} 3"#,
            r#"berth_store_seconds_count{kind="write"} 3"#,
            r#"berth_store_seconds_sum{kind="write"} 2.0003"#,
            "berth_store_conflicts_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
