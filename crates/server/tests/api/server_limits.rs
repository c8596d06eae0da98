//! The API server against clients that are slow or greedy on purpose, over raw TCP: a
//! client that sends its headers a byte at a time, an upload that stalls, more connections
//! than the cap, more event streams than a tenant may hold.

use std::time::{Duration, Instant};

use berth_server::host_config::ServerHostConfig;
use berth_server::HostConfig;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::event_limits::without_runtime;
use crate::harness::{error_code, TestServer};
use crate::sse::open_sse;

const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(2);
/// How late past its timeout a cut may come on a loaded machine.
const SLACK: Duration = Duration::from_secs(8);

async fn server_with(server: ServerHostConfig) -> TestServer {
    let host = HostConfig {
        server,
        ..Default::default()
    };
    without_runtime(host).await
}

fn limits(max_connections: usize, max_streams: usize) -> ServerHostConfig {
    ServerHostConfig {
        max_connections,
        header_timeout_s: HEADER_TIMEOUT.as_secs(),
        body_idle_timeout_s: BODY_IDLE_TIMEOUT.as_secs(),
        max_event_streams_per_tenant: max_streams,
        ..Default::default()
    }
}

/// Reads until the server closes the connection (or resets it); the bytes read.
async fn read_until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return all,
            Ok(n) => all.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn headers_sent_a_byte_at_a_time_are_cut_and_others_are_served_meanwhile() {
    let server = server_with(limits(1024, 64)).await;
    let began = Instant::now();
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    let request = b"GET /v1/health HTTP/1.1\r\nHost: berth\r\nX-Slow: ";
    let dribble = async {
        // One byte every 300 ms, forever: only the server can end this.
        for byte in request.iter().chain(std::iter::repeat(&b'a')) {
            if slow.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    };
    let deadline = HEADER_TIMEOUT + SLACK;
    let health = async {
        let (status, _, _) = server
            .raw(Method::GET, "/v1/health", None, &[], Bytes::new())
            .await;
        assert_eq!(status, StatusCode::OK, "others are served meanwhile");
    };
    let (cut, ()) = tokio::join!(tokio::time::timeout(deadline, dribble), health);
    let took = began.elapsed();
    assert!(
        cut.is_ok(),
        "a client sending its headers a byte every 300 ms was still connected after {took:?}"
    );
    assert!(
        took >= HEADER_TIMEOUT,
        "cut after {took:?}, before the timeout"
    );
    eprintln!("slow headers cut after {took:?}");

    // An idle keep-alive connection is cut the same way.
    let began = Instant::now();
    let mut idle = TcpStream::connect(server.addr).await.unwrap();
    tokio::time::timeout(deadline, read_until_closed(&mut idle))
        .await
        .expect("an idle connection is closed");
    eprintln!("idle connection closed after {:?}", began.elapsed());
}

#[tokio::test]
async fn a_stalled_upload_is_cut_and_a_slow_one_that_flows_is_not() {
    let server = server_with(limits(1024, 64)).await;
    let head = |len: usize| {
        format!(
            "POST /v1/tenants HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {len}\r\n\r\n",
            server.key
        )
    };

    // Promises 1000 bytes, sends 10, then nothing.
    let began = Instant::now();
    let mut stalled = TcpStream::connect(server.addr).await.unwrap();
    stalled.write_all(head(1000).as_bytes()).await.unwrap();
    stalled.write_all(b"{\"name\": ").await.unwrap();
    let answer = tokio::time::timeout(BODY_IDLE_TIMEOUT + SLACK, read_until_closed(&mut stalled))
        .await
        .expect("a stalled upload is cut");
    let took = began.elapsed();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(
        answer.contains("sent nothing of the request body"),
        "{answer}"
    );
    assert!(took >= BODY_IDLE_TIMEOUT);
    eprintln!("stalled upload cut after {took:?}");

    // A body sent a chunk every half timeout, for three timeouts, is read whole.
    let body = format!("{{\"name\": \"flowing\"{}}}", " ".repeat(12));
    let mut flowing = TcpStream::connect(server.addr).await.unwrap();
    flowing
        .write_all(head(body.len()).as_bytes())
        .await
        .unwrap();
    for chunk in body.as_bytes().chunks(3) {
        flowing.write_all(chunk).await.unwrap();
        tokio::time::sleep(BODY_IDLE_TIMEOUT / 2).await;
    }
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(30), flowing.read(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
}

#[tokio::test]
async fn connections_over_the_cap_wait_until_one_closes() {
    let mut config = limits(4, 64);
    // Held connections must not be cut by the header timeout during this test.
    config.header_timeout_s = 60;
    let server = server_with(config).await;
    let health = b"GET /v1/health HTTP/1.1\r\nHost: berth\r\n\r\n";
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(health).await.unwrap();
        let mut buf = [0u8; 1024];
        let n = stream.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(stream);
    }
    // The fifth is connected by the kernel (backlog) but not served while four are open.
    let mut fifth = TcpStream::connect(server.addr).await.unwrap();
    fifth.write_all(health).await.unwrap();
    let mut buf = [0u8; 1024];
    let waited = tokio::time::timeout(Duration::from_secs(1), fifth.read(&mut buf)).await;
    assert!(
        waited.is_err(),
        "a fifth connection was served while the cap is 4"
    );
    // One closes: the fifth is served.
    drop(held.pop());
    let n = tokio::time::timeout(Duration::from_secs(20), fifth.read(&mut buf))
        .await
        .expect("the waiting connection is served once a slot is free")
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
}

#[tokio::test]
async fn a_tenant_holds_a_bounded_number_of_event_streams() {
    let server = server_with(limits(1024, 2)).await;
    let (status, created) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "watched"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let path = "/v1/boxes/watched/events";
    let (s1, first) = open_sse(&server, path, &[]).await;
    let (s2, _second) = open_sse(&server, path, &[]).await;
    assert_eq!((s1, s2), (StatusCode::OK, StatusCode::OK));
    let (status, _, body) = server
        .raw(Method::GET, path, Some(&server.key), &[], Bytes::new())
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(error_code(&body), "too_many_requests", "{body}");
    // Pages are not streams: still served.
    let (status, _) = server
        .call(Method::GET, &format!("{path}?wait=false"), None)
        .await;
    assert_eq!(status, StatusCode::OK);

    // Closing a stream gives its slot back once the daemon notices (at its next write,
    // a keep-alive at the latest).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        let (status, _third) = open_sse(&server, path, &[]).await;
        if status == StatusCode::OK {
            break;
        }
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
        assert!(Instant::now() < deadline, "the slot never came back");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
