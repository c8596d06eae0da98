//! Talking to a real agent: the sandbox runtime, berth-init and the example echo harness.
//! Skips (`berth_testkit::skip`, part `sandbox`) when the host cannot run boxes.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::end_to_end::with_sandbox;
use crate::harness::TestServer;
use crate::sse::{open_sse, SseEvent};

pub(crate) async fn post(server: &TestServer, name: &str, content: &str) -> Value {
    let (status, posted) = server
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/messages"),
            Some(json!({ "content": content })),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{posted}");
    posted
}

/// Reads the stream until a `result` event; every event seen, in order.
pub(crate) async fn until_result(sse: &mut crate::sse::SseReader) -> Vec<SseEvent> {
    let mut seen = Vec::new();
    loop {
        let event = sse.next().await;
        let done = event.event == "result";
        seen.push(event);
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn an_echo_box_remembers_across_a_stop_and_answers_on_the_stream() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "bob", "template": "echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let (status, mut sse) = open_sse(&server, "/v1/boxes/bob/events", &[]).await;
    assert_eq!(status, StatusCode::OK);
    post(&server, "bob", "remember 42").await;
    let first = until_result(&mut sse).await;
    let result = first.last().unwrap();
    assert!(
        result.data["data"]["result"]
            .as_str()
            .unwrap()
            .contains("42"),
        "{first:?}"
    );
    let last_id = result.id;
    drop(sse);

    let (status, stopped) = server.call(Method::POST, "/v1/boxes/bob/stop", None).await;
    assert_eq!(
        (status, &stopped["state"]),
        (StatusCode::OK, &json!("stopped"))
    );

    // Wake on message: the stopped box starts, the harness resumes its session from disk.
    let began = Instant::now();
    let resume = last_id.to_string();
    let (status, mut sse) = open_sse(
        &server,
        "/v1/boxes/bob/events",
        &[("last-event-id", &resume)],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    post(&server, "bob", "what did I say?").await;
    let second = until_result(&mut sse).await;
    println!(
        "wake: message posted → result on SSE in {} ms",
        began.elapsed().as_millis()
    );
    assert!(
        second.iter().all(|e| e.id > last_id),
        "resumed after {last_id}"
    );
    let ids: Vec<u64> = second.iter().map(|e| e.id).collect();
    let expected: Vec<u64> = (last_id + 1..=last_id + ids.len() as u64).collect();
    assert_eq!(ids, expected, "no gap in seqs");
    let answer = second.last().unwrap().data["data"]["result"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        answer.contains("42"),
        "the resumed session remembers: {answer}"
    );
    assert!(
        second
            .iter()
            .any(|e| e.event == "state" && e.data["data"]["state"] == "running"),
        "the wake is on the stream: {second:?}"
    );

    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, list) = server
            .call(Method::GET, "/v1/boxes/bob/messages", None)
            .await;
        let messages = list["messages"].as_array().unwrap();
        if messages.len() == 2 && messages.iter().all(|m| m["state"] == "delivered") {
            break;
        }
        assert!(Instant::now() < deadline, "not delivered: {list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.shut_down().await;
}

/// Kills the containers of a data dir on drop (the first daemon of a crash test has no
/// guard of its own).
pub(crate) struct Containers(pub(crate) std::path::PathBuf);

impl Drop for Containers {
    fn drop(&mut self) {
        crate::harness::kill_containers("runc", &self.0.join("oci"));
    }
}

/// A daemon on a tokio runtime of its own (without the container guard): dropping that
/// runtime ends every task of the daemon at once, as SIGKILL ends the process ([`kill`]).
pub(crate) fn start_killable(
    runtime: std::sync::Arc<dyn berth_runtime::Runtime>,
    data: tempfile::TempDir,
) -> (tokio::runtime::Runtime, TestServer) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = rt.block_on(TestServer::start(runtime, None, data));
        (rt, server)
    })
    .join()
    .unwrap()
}

/// Kills a daemon of [`start_killable`]; its data dir once it has let go of it. Its boxes
/// keep running.
pub(crate) async fn kill(
    daemon_runtime: tokio::runtime::Runtime,
    server: TestServer,
) -> tempfile::TempDir {
    daemon_runtime.shutdown_background();
    crate::messages::crash(server).await
}

#[tokio::test]
async fn a_restarted_daemon_reattaches_to_a_running_echo_box() {
    let data = tempfile::tempdir().unwrap();
    let runtime = match crate::end_to_end::sandbox(data.path()) {
        Ok(runtime) => runtime,
        Err(reason) => {
            berth_testkit::skip("sandbox", &reason);
            return;
        }
    };
    let _cleanup = Containers(data.path().to_owned());
    let (daemon_runtime, first) = start_killable(runtime, data);
    let (status, body) = first
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "bob", "template": "echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, mut sse) = open_sse(&first, "/v1/boxes/bob/events", &[]).await;
    post(&first, "bob", "remember 42").await;
    let last_id = until_result(&mut sse).await.last().unwrap().id;
    drop(sse);
    // The daemon dies; the box keeps running.
    let data = kill(daemon_runtime, first).await;

    let runtime = crate::end_to_end::sandbox(data.path()).unwrap();
    let mut second = TestServer::start(runtime, Some("runc".into()), data).await;
    let (_, bob) = second.call(Method::GET, "/v1/boxes/bob", None).await;
    assert_eq!(bob["state"], "running", "reattached: {bob}");
    let resume = last_id.to_string();
    let (_, mut sse) = open_sse(
        &second,
        "/v1/boxes/bob/events",
        &[("last-event-id", &resume)],
    )
    .await;
    post(&second, "bob", "what did I say?").await;
    let events = until_result(&mut sse).await;
    let ids: Vec<u64> = events.iter().map(|e| e.id).collect();
    let expected: Vec<u64> = (last_id + 1..=last_id + ids.len() as u64).collect();
    assert_eq!(ids, expected, "no gap in seqs");
    assert!(
        !events.iter().any(|e| e.event == "harness_start"),
        "the same boot answered: {events:?}"
    );
    let answer = events.last().unwrap().data["data"]["result"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(answer.contains("42"), "{answer}");
    drop(sse);
    second.shut_down().await;
}
