use crate::fixture::{
    connect_head, exchange, expect_closed, expect_closed_without_eof, Hello, Setup, Upstream, API,
};
use berth_egress::gateway::{JsonlDirSink, Verdict};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

#[tokio::test]
async fn audit_file_has_one_line_per_decision_with_all_fields() {
    let hello = Hello::sni(API).bytes();
    let mut up = Upstream::start(hello.len()).await;
    let audit_dir = tempfile::tempdir().unwrap();
    let file_sink = Arc::new(JsonlDirSink::new(audit_dir.path()).unwrap());
    let mut setup = Setup::new(Some(&up));
    setup.sink = Some(file_sink.clone());
    let h = setup.start();

    let mut s = h.connect().await;
    assert_eq!(exchange(&mut s, &hello).await, b"pong");
    up.received.recv().await.unwrap();
    let mut s = h.connect().await;
    let head = connect_head(&mut s, "evil.example.test:443").await;
    assert!(head.starts_with("HTTP/1.1 403 "), "{head}");
    expect_closed(&mut s).await;
    let box_id = h.box_id.clone();
    // Every line is written before the gateway returns from shutdown.
    h.shutdown().await;

    // The writer thread has every line once `sync` returns.
    file_sink.sync();
    let (lines, next) = file_sink.read_page(&box_id, 0, 100).unwrap();
    assert_eq!((lines.len(), next), (2, 2), "{lines:?}");
    for line in &lines {
        for field in [
            "box",
            "time",
            "target",
            "port",
            "via",
            "resolved",
            "decision",
            "reason",
            "bytes_up",
            "bytes_down",
            "duration_ms",
        ] {
            assert!(line.get(field).is_some(), "{field} missing in {line}");
        }
        assert_eq!(line["box"], box_id.as_str());
        let time = line["time"].as_str().unwrap();
        time::OffsetDateTime::parse(time, &time::format_description::well_known::Rfc3339).unwrap();
    }
    let allow = lines.iter().find(|l| l["decision"] == "allow").unwrap();
    assert_eq!(allow["via"], "direct");
    assert_eq!(allow["target"], API);
    assert_eq!(allow["resolved"], up.addr.to_string());
    assert_eq!(allow["bytes_up"], (hello.len() + 4) as u64);
    assert_eq!(allow["bytes_down"], 4);
    assert!(allow["reason"].is_null());
    let deny = lines.iter().find(|l| l["decision"] == "deny").unwrap();
    assert_eq!(deny["via"], "connect");
    assert_eq!(deny["reason"], "not_allowed");
    assert!(deny["resolved"].is_null());
}

#[tokio::test]
async fn shutdown_cuts_open_connections_and_still_audits_them() {
    let hello = Hello::sni(API).bytes();
    let up = Upstream::start(hello.len()).await;
    let h = Setup::new(Some(&up)).start();
    let mut s = h.connect().await;
    s.write_all(&hello).await.unwrap();
    let mut pong = [0u8; 4];
    s.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"pong");
    // The connection is spliced and idle in both directions; shutdown must end it.
    let sink = h.sink.clone();
    let socket = h.socket.clone();
    tokio::time::timeout(Duration::from_secs(20), h.shutdown())
        .await
        .expect("shutdown waits for open connections forever");
    expect_closed_without_eof(&mut s).await;
    let records = sink.wait_for(1).await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].decision, Verdict::Allow);
    assert_eq!(
        (records[0].bytes_up, records[0].bytes_down),
        (hello.len() as u64, 4)
    );
    // The listener is gone with the gateway.
    assert!(UnixStream::connect(&socket).await.is_err());
}
