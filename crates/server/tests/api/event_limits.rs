//! A box's event log as the daemon serves it is bounded by bytes, not only by count: a log
//! of 1000 events of ~1 MiB each (what a harness may write) is read in pages of at most
//! 4 MiB of event data, and a stream of it never holds more than about a page in memory.

use berth_protocol::harness::GuestEvent;
use berth_protocol::BoxId;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_server::{HostConfig, Runtimes};

use crate::harness::{NoBoxes, TestServer};
use crate::sse::open_sse;

/// Event data a page may carry (the daemon's bound), plus room for the JSON around it.
const PAGE_DATA_BYTES: usize = 4 << 20;
const PAGE_SLACK: usize = 256 << 10;

/// A box of a daemon with no runtime, holding `count` events of `size` bytes of text each.
pub(crate) async fn box_with_events(
    server: &TestServer,
    name: &str,
    count: u64,
    size: usize,
) -> BoxId {
    let (status, created) = server
        .call(Method::POST, "/v1/boxes", Some(json!({ "name": name })))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id: BoxId = created["id"].as_str().unwrap().parse().unwrap();
    let text = "x".repeat(size);
    // 50 events (~50 MiB) per transaction: one fsync each, as the event pump batches.
    for first in (1..=count).step_by(50) {
        let batch: Vec<GuestEvent> = (first..(first + 50).min(count + 1))
            .map(|seq| GuestEvent {
                seq,
                kind: "assistant".into(),
                data: json!({ "type": "assistant", "text": text }),
                at_ms: 0,
            })
            .collect();
        server.store.append_guest_events(&id, &batch).unwrap();
    }
    id
}

/// A daemon without a runtime, with these `berth.toml` settings.
pub(crate) async fn without_runtime(host: HostConfig) -> TestServer {
    TestServer::start_with_host(
        Runtimes::single(Arc::new(NoBoxes)),
        None,
        tempfile::tempdir().unwrap(),
        host,
    )
    .await
}

/// The process's peak resident memory since the last [`reset_peak_rss`], in MiB.
pub(crate) fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .expect("VmHWM in kB");
    kib / 1024
}

pub(crate) fn reset_peak_rss() {
    // "5" resets the peak RSS to the current RSS (proc(5), clear_refs).
    std::fs::write("/proc/self/clear_refs", "5").expect("reset VmHWM");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_of_huge_events_is_bounded_by_bytes_and_a_stream_by_memory() {
    // Retention large enough to keep all of it: this test is about reading.
    let mut host = HostConfig::default();
    host.events.max_bytes_per_box = 4 << 30;
    let server = without_runtime(host).await;
    let id = box_with_events(&server, "loud", 1000, 1 << 20).await;
    let path = format!("/v1/boxes/{id}/events?wait=false");

    reset_peak_rss();
    let before = peak_rss_mib();
    let (status, _, body) = server
        .raw(Method::GET, &path, Some(&server.key), &[], Bytes::new())
        .await;
    let first_page_peak = peak_rss_mib() - before;
    assert_eq!(status, StatusCode::OK);
    eprintln!(
        "first page: {} bytes, peak RSS +{first_page_peak} MiB",
        body.len()
    );
    assert!(
        body.len() <= PAGE_DATA_BYTES + PAGE_SLACK,
        "one page carried {} bytes of 1000 events of 1 MiB",
        body.len()
    );
    let page: Value = serde_json::from_slice(&body).unwrap();
    assert!(!page["events"].as_array().unwrap().is_empty());
    assert_eq!(page["more"], true, "the page says there is more");

    // Paging on reads every event once, in order, each page bounded (the first 100 MiB
    // here: the store's tests read to the end).
    let (mut after, mut seen, mut pages) = (0u64, 0u64, 0);
    while seen < 100 {
        let (status, _, body) = server
            .raw(
                Method::GET,
                &format!("{path}&after={after}"),
                Some(&server.key),
                &[],
                Bytes::new(),
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.len() <= PAGE_DATA_BYTES + PAGE_SLACK);
        let page: Value = serde_json::from_slice(&body).unwrap();
        let events = page["events"].as_array().unwrap();
        for e in events {
            seen += 1;
            assert_eq!(e["seq"], seen);
        }
        pages += 1;
        after = page["next_after"].as_u64().unwrap();
        assert_eq!(page["more"], true);
        assert!(
            !events.is_empty(),
            "a page with more to come is never empty"
        );
    }
    eprintln!("{seen} events of 1 MiB in {pages} pages");

    // A stream of the log holds about a page at a time, however fast it is read.
    reset_peak_rss();
    let before = peak_rss_mib();
    let (status, mut sse) = open_sse(&server, &format!("/v1/boxes/{id}/events"), &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sse.next().await.id, 1);
    // A reader that stops reading: the daemon writes until the socket is full, then
    // waits; it does not read on into the log. (An observation window, not a wait for
    // a condition: what is measured is that nothing grows during it.)
    tokio::time::sleep(Duration::from_secs(3)).await;
    for seq in 2..=100 {
        let event = sse.next().await;
        assert_eq!(event.id, seq);
    }
    let stream_peak = peak_rss_mib() - before;
    eprintln!("stream of 100 events of 1 MiB: peak RSS +{stream_peak} MiB");
    assert!(
        stream_peak < 256,
        "streaming 100 events of 1 MiB raised the peak RSS by {stream_peak} MiB"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_events_are_pruned_in_the_background_and_readers_are_told_what_they_missed() {
    let mut host = HostConfig::default();
    host.events.max_bytes_per_box = 2 << 20;
    host.events.prune_every_s = 1;
    let server = without_runtime(host).await;
    // 10 events of 512 KiB: 5 MiB against a budget of 2 MiB.
    let id = box_with_events(&server, "chatty", 10, 512 << 10).await;
    let page_path = format!("/v1/boxes/{id}/events?wait=false");
    let deadline = Instant::now() + Duration::from_secs(60);
    let page = loop {
        let (status, page) = server.call(Method::GET, &page_path, None).await;
        assert_eq!(status, StatusCode::OK);
        if !page["gap"].is_null() {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "nothing was pruned: {}",
            page["next_after"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let last_pruned = page["gap"]["last"].as_u64().unwrap();
    assert_eq!(page["gap"]["first"], 1);
    let events = page["events"].as_array().unwrap();
    assert_eq!(
        events[0]["seq"],
        last_pruned + 1,
        "the oldest kept comes next"
    );
    assert_eq!(events.last().unwrap()["seq"], 10, "the newest is kept");
    assert!(
        events.len() <= 4,
        "{} events of 512 KiB kept under a 2 MiB budget",
        events.len()
    );

    // A stream from the start is told first, with the last pruned seq as its id.
    let events_path = format!("/v1/boxes/{id}/events");
    let (_, mut sse) = open_sse(&server, &events_path, &[]).await;
    let gap = sse.next().await;
    assert_eq!(gap.event, "gap");
    assert_eq!(gap.id, last_pruned);
    // Shaped like any event, so a client's event parser reads it.
    assert_eq!(gap.data["seq"], last_pruned);
    assert_eq!(gap.data["type"], "gap");
    assert_eq!(gap.data["data"]["first"], 1);
    assert_eq!(gap.data["data"]["last"], last_pruned);
    assert_eq!(sse.next().await.id, last_pruned + 1);
    // A client resuming from there has missed nothing.
    let resume = last_pruned.to_string();
    let (_, mut sse) = open_sse(&server, &events_path, &[("last-event-id", &resume)]).await;
    let next = sse.next().await;
    assert_eq!(
        (next.event.as_str(), next.id),
        ("assistant", last_pruned + 1)
    );

    // Seqs go on after pruning.
    let seq = server
        .store
        .append_event(&id, "note", &json!({"after": "pruning"}))
        .unwrap();
    assert_eq!(seq, 11);
}
