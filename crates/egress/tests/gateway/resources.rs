use crate::fixture::{
    assert_deny, expect_closed_without_eof, Harness, Hello, Setup, Upstream, API,
};
use berth_egress::gateway::Verdict;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// Opens a spliced connection and waits for the upstream's `pong`; it stays open.
async fn open_relay(h: &Harness, hello: &[u8]) -> UnixStream {
    let mut s = h.connect().await;
    s.write_all(hello).await.unwrap();
    let mut pong = [0u8; 4];
    s.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"pong");
    s
}

#[tokio::test]
async fn a_box_over_its_connection_cap_is_refused_at_once() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let mut setup = Setup::new(Some(&up));
    setup.max_connections = 3;
    let h = setup.start();
    let mut open = Vec::new();
    for _ in 0..3 {
        open.push(open_relay(&h, &hello).await);
    }
    // The fourth is closed without a byte and without reaching upstream.
    let mut over = h.connect().await;
    let _ = over.write_all(&hello).await;
    expect_closed_without_eof(&mut over).await;
    let r = &h.sink.wait_for(1).await[0];
    assert_deny(r, "too_many_connections");
    assert_eq!(up.accepted.load(Ordering::SeqCst), 3);
    // One ends: there is room again.
    let mut first = open.remove(0);
    first.shutdown().await.unwrap();
    let mut rest = Vec::new();
    first.read_to_end(&mut rest).await.unwrap();
    up.received.recv().await.unwrap();
    h.sink.wait_for(2).await;
    open.push(open_relay(&h, &hello).await);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 4);
    h.shutdown().await;
}

#[tokio::test]
async fn an_idle_relay_is_closed_and_a_busy_one_is_not() {
    let hello = Hello::sni(API).bytes();
    let up = Upstream::start(hello.len()).await;
    let mut setup = Setup::new(Some(&up));
    setup.timeouts.idle = Duration::from_millis(400);
    let h = setup.start();

    // Busy: a byte every 100 ms for well past the idle limit keeps it open.
    let mut busy = open_relay(&h, &hello).await;
    for _ in 0..15 {
        busy.write_all(b"x").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(h.sink.records().is_empty(), "the busy relay was closed");

    // Idle: nothing either way; the gateway closes it on its own.
    expect_closed_without_eof(&mut busy).await;
    let r = &h.sink.wait_for(1).await[0];
    assert_eq!(r.decision, Verdict::Allow);
    assert_eq!(r.closed, Some("idle"), "{r:?}");
    assert_eq!(r.bytes_up, hello.len() as u64 + 15);
    h.shutdown().await;
}
