//! One busy box must not slow others' requests: while one writer commits event batches
//! back to back (each fsync'd, as the event pump of a chatty box does), authentication and
//! reads of another box keep a bounded latency. Prints the numbers as ratios to the same
//! reads on an idle store.
//!
//! Both databases promise it the same way: a read runs on a pooled connection of its own
//! (SQLite's read-only WAL readers, a Postgres pool connection) and sees the last commit
//! without waiting for the write in progress.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_protocol::harness::GuestEvent;
use berth_protocol::BoxId;
use serde_json::json;

use crate::ingress_tests::{insert_box, setup};
use crate::Store;

/// Reads measured in each phase, at least.
const READS: usize = 300;
/// Writer commits the loaded phase lasts, at least.
const COMMITS: u64 = 30;

/// One auth, one box lookup and one message list of `quiet`, until `done` says so; each
/// round's latency.
fn read_latencies(
    store: &Store,
    key: &str,
    quiet: &BoxId,
    done: impl Fn(usize) -> bool,
) -> Vec<Duration> {
    let mut took = Vec::new();
    while !done(took.len()) {
        let began = Instant::now();
        assert!(store.authenticate(key).unwrap().is_some());
        assert!(store.get_box(quiet).unwrap().is_some());
        store.list_messages(quiet, 0, 10).unwrap();
        took.push(began.elapsed());
        // Readers come and go; they do not spin on the store.
        std::thread::sleep(Duration::from_micros(200));
    }
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

conformance! {
    fn reads_of_a_quiet_box_do_not_queue_behind_a_busy_box_writing_events(db) {
        let (store, busy) = setup(db);
        let store = Arc::new(store);
        let tenant = store.get_box(&busy).unwrap().unwrap().tenant_id;
        let key = store.create_api_key(&tenant, false).unwrap();
        let quiet = insert_box(&store, tenant, "quiet").id;

        let mut idle = read_latencies(&store, &key, &quiet, |n| n >= READS);
        idle.sort();

        let stop = Arc::new(AtomicBool::new(false));
        let commits = Arc::new(AtomicU64::new(0));
        let writer = {
            let (store, stop, busy) = (store.clone(), stop.clone(), busy.clone());
            let commits = commits.clone();
            std::thread::spawn(move || {
                let mut seq = 0u64;
                let text = "x".repeat(64 << 10);
                while !stop.load(Ordering::Relaxed) {
                    // 16 events of 64 KiB per transaction, one fsync each.
                    let batch: Vec<GuestEvent> = (0..16)
                        .map(|_| {
                            seq += 1;
                            GuestEvent {
                                seq,
                                kind: "log".into(),
                                data: json!({ "line": text }),
                                at_ms: 0,
                            }
                        })
                        .collect();
                    store.append_guest_events(&busy, &batch).unwrap();
                    commits.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        // From the writer's first commit on, for at least COMMITS more of them.
        while commits.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        let began = Instant::now();
        let first = commits.load(Ordering::Relaxed);
        let mut loaded = read_latencies(&store, &key, &quiet, |n| {
            n >= READS && commits.load(Ordering::Relaxed) >= first + COMMITS
        });
        let elapsed = began.elapsed();
        let commits = commits.load(Ordering::Relaxed) - first;
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
        loaded.sort();

        let (idle_p50, idle_p99) = (percentile(&idle, 0.5), percentile(&idle, 0.99));
        let (p50, p99) = (percentile(&loaded, 0.5), percentile(&loaded, 0.99));
        let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-6);
        println!(
            "auth + box + messages of a quiet box: idle p50 {idle_p50:?} p99 {idle_p99:?}; \
             while another box committed {commits} event batches ({:.0}/s): p50 {p50:?} ({:.1}x) \
             p99 {p99:?} ({:.1}x)",
            commits as f64 / elapsed.as_secs_f64(),
            ratio(p50, idle_p50),
            ratio(p99, idle_p99),
        );
        assert!(commits > 0, "the writer never committed");
        // Generous: on a loaded 2-core machine a read may be descheduled, but it never waits
        // out the writer's commits (each of which is an fsync of ~1 MiB).
        assert!(
            p50 < Duration::from_millis(20),
            "reads of a quiet box took p50 {p50:?} while another box wrote events"
        );
    }
}
