//! Idle reclaim against the fake runtime: a box nobody uses for its `stop_after_s` is
//! stopped (volume kept); an open exec stream keeps it up; the next call wakes it again.
//! The test daemons check every 200 ms (`harness.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};

use crate::fake::FakeRuntime;
use crate::harness::{error_code, TestServer};

pub(crate) async fn with_fake() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    (TestServer::start(fake.clone(), None, data).await, fake)
}

pub(crate) async fn create(server: &TestServer, body: Value) -> Value {
    let (status, created) = server.call(Method::POST, "/v1/boxes", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created
}

pub(crate) async fn state(server: &TestServer, name: &str) -> String {
    let (status, body) = server
        .call(Method::GET, &format!("/v1/boxes/{name}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["state"].as_str().unwrap().to_owned()
}

/// Polls until the box is in `want`; how long that took.
pub(crate) async fn wait_state(
    server: &TestServer,
    name: &str,
    want: &str,
    within: Duration,
) -> Duration {
    let began = Instant::now();
    loop {
        let now = state(server, name).await;
        if now == want {
            return began.elapsed();
        }
        assert!(
            began.elapsed() < within,
            "{name} still {now} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The box stays in `want` for all of `period`.
pub(crate) async fn stays(server: &TestServer, name: &str, want: &str, period: Duration) {
    let began = Instant::now();
    while began.elapsed() < period {
        assert_eq!(
            state(server, name).await,
            want,
            "after {:?}",
            began.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn idle_timeouts_default_to_the_templates_and_are_checked() {
    let (server, _fake) = with_fake().await;
    let created = create(&server, json!({"name": "plain"})).await;
    assert_eq!(created["stop_after_s"], 300, "{created}");
    let created = create(&server, json!({"name": "quick", "stop_after_s": 1})).await;
    assert_eq!(created["stop_after_s"], 1);
    let never = create(&server, json!({"name": "awake", "stop_after_s": 0})).await;
    assert_eq!(never["stop_after_s"], 0, "0: never stopped");
    for bad in [json!(604_801), json!(-1), json!("5")] {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/boxes",
                Some(json!({"name": "bad", "stop_after_s": bad})),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(error_code(&body), "invalid_request");
    }
}

#[tokio::test]
async fn an_idle_box_is_stopped_after_its_timeout_and_wakes_on_the_next_call() {
    let (server, fake) = with_fake().await;
    let created = create(&server, json!({"name": "napper", "stop_after_s": 1})).await;
    let id = created["id"].as_str().unwrap().to_owned();
    let (status, body) = server
        .call(Method::POST, "/v1/boxes/napper/start", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "running");
    let took = wait_state(&server, "napper", "stopped", Duration::from_secs(10)).await;
    // Not before its timeout (the start itself counts as activity).
    assert!(took >= Duration::from_millis(800), "stopped after {took:?}");
    assert!(fake
        .stopped
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.as_str() == id));
    assert!(
        fake.removed.lock().unwrap().is_empty(),
        "the volume is kept"
    );
    // The next call wakes it, with the same files.
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/boxes/napper/exec",
            Some(json!({"cmd": ["true"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(fake.starts.load(Ordering::SeqCst), 2);
    assert_eq!(state(&server, "napper").await, "running");
    wait_state(&server, "napper", "stopped", Duration::from_secs(10)).await;
}

#[tokio::test]
async fn an_open_exec_stream_keeps_a_box_from_idling() {
    let (server, _fake) = with_fake().await;
    create(&server, json!({"name": "worker", "stop_after_s": 1})).await;
    // `hang` runs until the box stops; the stream stays open meanwhile.
    let stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let req = http::Request::builder()
        .method(Method::POST)
        .uri("/v1/boxes/worker/exec")
        .header("host", "berth")
        .header("authorization", format!("Bearer {}", server.key))
        .header("accept", "application/x-ndjson")
        .body(Full::new(bytes::Bytes::from(r#"{"cmd":["hang"]}"#)))
        .unwrap();
    let response = sender.send_request(req).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut body = response.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("started"));
    stays(&server, "worker", "running", Duration::from_secs(3)).await;
    // The stream ends (the client goes away): the box idles out.
    drop(body);
    drop(sender);
    conn.abort();
    let took = wait_state(&server, "worker", "stopped", Duration::from_secs(10)).await;
    assert!(took >= Duration::from_millis(800), "stopped after {took:?}");
}

#[tokio::test]
async fn file_calls_restart_the_idle_clock() {
    let (server, _fake) = with_fake().await;
    create(&server, json!({"name": "files", "stop_after_s": 2})).await;
    let began = Instant::now();
    // A file call every 500 ms for 3 s: never 2 s without activity.
    while began.elapsed() < Duration::from_secs(3) {
        let (status, _, _) = server
            .raw(
                Method::PUT,
                "/v1/boxes/files/files?path=/home/user/a",
                Some(&server.key),
                &[],
                bytes::Bytes::from_static(b"x"),
            )
            .await;
        assert_eq!(status, StatusCode::NO_CONTENT);
        assert_eq!(state(&server, "files").await, "running");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    wait_state(&server, "files", "stopped", Duration::from_secs(10)).await;
}
