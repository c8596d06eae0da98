//! Sockets handed over by berth-init (a sandbox's PID 1) instead of copied: served like a
//! stream, and taken from no one else.

use crate::fixture::{
    assert_allow, assert_deny, connect_head, exchange, expect_closed, Harness, Hello, Setup,
    Upstream, API,
};
use berth_egress::gateway::{HandoffSender, Via};
use std::sync::atomic::Ordering;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

/// The fixture's gateway, taking sockets from this process (the test plays berth-init).
fn taking_handoffs(up: &Upstream) -> Setup {
    let mut setup = Setup::new(Some(up));
    setup.handoff_from = HandoffSender::ThisProcess;
    setup
}

/// On `direct` a ClientHello straight away, on `connect` a CONNECT first: both reach the
/// upstream and are audited as allowed, in that order.
async fn direct_then_connect_are_allowed<S: AsyncRead + AsyncWrite + Unpin>(
    h: &Harness,
    up: &mut Upstream,
    [mut direct, mut connect]: [S; 2],
) {
    let hello = Hello::sni(API).bytes();
    let mut expected = hello.clone();
    expected.extend(b"ping");
    assert_eq!(exchange(&mut direct, &hello).await, b"pong");
    assert_eq!(up.received.recv().await.unwrap(), expected);
    let head = connect_head(&mut connect, "api.example.test:443").await;
    assert_eq!(head, "HTTP/1.1 200 Connection Established\r\n\r\n");
    assert_eq!(exchange(&mut connect, &hello).await, b"pong");
    assert_eq!(up.received.recv().await.unwrap(), expected);
    let records = h.sink.wait_for(2).await;
    assert_eq!(records[0].box_id, h.box_id);
    assert_allow(&records[0], Via::Direct, up, expected.len() as u64);
    assert_allow(&records[1], Via::Connect, up, expected.len() as u64);
}

#[tokio::test]
async fn a_handed_socket_reaches_an_allowed_host_directly_and_through_connect() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let h = taking_handoffs(&up).start();
    let handed = [h.hand_over().await, h.hand_over().await];
    direct_then_connect_are_allowed(&h, &mut up, handed).await;
    h.shutdown().await;
}

#[tokio::test]
async fn a_handed_socket_to_an_unlisted_host_is_refused() {
    let hello = Hello::sni(API).bytes();
    let up = Upstream::start(hello.len()).await;
    let h = taking_handoffs(&up).start();

    let mut client = h.hand_over().await;
    client
        .write_all(&Hello::sni("evil.example.test").bytes())
        .await
        .unwrap();
    expect_closed(&mut client).await;
    let mut client = h.hand_over().await;
    let head = connect_head(&mut client, "evil.example.test:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");

    let records = h.sink.wait_for(2).await;
    assert_eq!(records.len(), 2, "{records:?}");
    for (r, via) in records.iter().zip([Via::Direct, Via::Connect]) {
        assert_deny(r, "not_allowed");
        assert_eq!(r.via, Some(via));
        assert_eq!(r.target.as_deref(), Some("evil.example.test"));
    }
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

/// What box root could do with the box's egress socket: hand over a socket of its own (and
/// keep a duplicate, to block the host in `splice` later). The daemon takes sockets only
/// from the box's init; this test process is not one.
#[tokio::test]
async fn a_socket_handed_by_anyone_but_the_boxs_init_is_refused_and_closed() {
    let hello = Hello::sni(API).bytes();
    let up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();

    let mut client = h.hand_over().await;
    // Were it served, this would reach the upstream.
    let _ = client.write_all(&hello).await;
    expect_closed(&mut client).await;
    let records = h.sink.wait_for(1).await;
    assert_deny(&records[0], "handoff_refused");
    assert_eq!(records[0].target, None);
    assert_eq!(up.accepted.load(Ordering::SeqCst), 0);
    h.shutdown().await;
}

/// Older berth-inits, VM bridges and anything not PID 1 copy bytes into the stream: the
/// first byte, read while looking for a socket, is not lost.
#[tokio::test]
async fn a_plain_stream_is_still_served_where_handoffs_are_taken() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let h = taking_handoffs(&up).start();
    let streams = [h.connect().await, h.connect().await];
    direct_then_connect_are_allowed(&h, &mut up, streams).await;
    h.shutdown().await;
}
