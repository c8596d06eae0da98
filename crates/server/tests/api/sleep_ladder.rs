//! The sleep ladder on real sandbox boxes (runc): pause freezes a box's processes in memory
//! and a resume (by hand, or by the next call with `auto_resume`) finds them where they
//! were; the reclaimer takes an idle box down its rungs; the sandbox refuses snapshots and
//! says why. Snapshots themselves are tested on `qemu` (crates/runtime/tests/qemu.rs).

use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::end_to_end::{exec, with_sandbox};
use crate::harness::{error_code, TestServer};
use crate::idle::{create, state, wait_state};

/// A counter kept only in a shell's memory, written out every 50 ms: a restart would
/// start it again from 1.
const COUNTER: &str =
    "i=0; while :; do i=$((i+1)); echo \"$$ $i\" > /tmp/counter; sleep 0.05; done";

/// `(pid, count)` the counter process last wrote.
async fn counter(server: &TestServer, name: &str) -> (u64, u64) {
    let out = exec(server, name, &["cat", "/tmp/counter"]).await;
    let text = out["stdout"].as_str().unwrap_or_default().trim().to_owned();
    let mut parts = text.split(' ').map(|p| p.parse::<u64>().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// Waits until the counter has counted past `past`.
async fn counted_past(server: &TestServer, name: &str, past: u64) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = counter(server, name).await;
        if now.1 > past {
            return now;
        }
        assert!(Instant::now() < deadline, "the counter stays at {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn post(server: &TestServer, name: &str, verb: &str) -> (StatusCode, Value) {
    server
        .call(Method::POST, &format!("/v1/boxes/{name}/{verb}"), None)
        .await
}

async fn start_counter(server: &TestServer, name: &str) -> (u64, u64) {
    let (status, body) = server
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/exec"),
            Some(json!({"cmd": ["sh", "-c", COUNTER], "background": true, "keep_awake": false})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    counted_past(server, name, 3).await
}

#[tokio::test]
async fn a_paused_box_keeps_its_processes_in_memory_and_a_call_resumes_it() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    create(&server, json!({"name": "sleepy", "stop_after_s": 0})).await;
    let before = start_counter(&server, "sleepy").await;

    let (status, paused) = post(&server, "sleepy", "pause").await;
    assert_eq!(status, StatusCode::OK, "{paused}");
    assert_eq!(paused["state"], "paused", "{paused}");
    assert!(
        paused["memory_bytes"].as_u64().is_some_and(|b| b > 0),
        "a paused box still holds its memory: {paused}"
    );
    // A call wakes it (auto_resume is on by default): the same process, counting on.
    let after = counted_past(&server, "sleepy", before.1).await;
    assert_eq!(after.0, before.0, "the same process after the resume");
    assert!(
        after.1 > before.1,
        "{after:?} after {before:?}: the count went on"
    );
    assert_eq!(state(&server, "sleepy").await, "running");
}

#[tokio::test]
async fn with_auto_resume_off_a_paused_box_refuses_calls_until_resumed() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    create(
        &server,
        json!({"name": "held", "stop_after_s": 0, "auto_resume": false}),
    )
    .await;
    let before = start_counter(&server, "held").await;
    let (status, body) = post(&server, "held", "pause").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes/held/exec",
            Some(json!({"cmd": ["true"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "conflict");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("POST /v1/boxes/held/resume"), "{message}");
    assert_eq!(state(&server, "held").await, "paused");

    let (status, body) = post(&server, "held", "resume").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "running");
    let after = counted_past(&server, "held", before.1).await;
    assert_eq!(after.0, before.0, "the same process after the resume");
}

#[tokio::test]
async fn an_idle_box_is_paused_then_stopped_and_the_sandbox_refuses_snapshots() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    // The sandbox has no checkpointer: it says so, and a box cannot ask for that rung.
    let (status, runtimes) = server.call(Method::GET, "/v1/runtimes", None).await;
    assert_eq!(status, StatusCode::OK, "{runtimes}");
    let sandbox = runtimes["runtimes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "sandbox")
        .unwrap_or_else(|| panic!("{runtimes}"));
    assert_eq!(sandbox["capabilities"]["snapshot"], false, "{sandbox}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "nosnap", "snapshot_after_s": 60})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("snapshot_after_s"),
        "{body}"
    );
    for (ladder, why) in [
        (
            json!({"pause_after_s": 60, "stop_after_s": 60}),
            "must be longer",
        ),
        (json!({"pause_after_s": 604_801}), "pause_after_s"),
    ] {
        let mut body = ladder.clone();
        body["name"] = json!("bad");
        let (status, answer) = server.call(Method::POST, "/v1/boxes", Some(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{ladder}: {answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(why),
            "{answer}"
        );
    }

    create(
        &server,
        json!({"name": "ladder", "pause_after_s": 1, "stop_after_s": 4}),
    )
    .await;
    let (status, body) = post(&server, "ladder", "snapshot").await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("does not support snapshot"),
        "{body}"
    );
    let (status, body) = post(&server, "ladder", "start").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait_state(&server, "ladder", "paused", Duration::from_secs(60)).await;
    let (_, view) = server.call(Method::GET, "/v1/boxes/ladder", None).await;
    assert_eq!(view["state_reason"], "idle", "{view}");
    wait_state(&server, "ladder", "stopped", Duration::from_secs(60)).await;
    // Changing the ladder applies at once and is checked like a new box's.
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/boxes/ladder",
            Some(json!({"pause_after_s": 0, "stop_after_s": 600, "auto_resume": false})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        (
            &body["pause_after_s"],
            &body["stop_after_s"],
            &body["auto_resume"]
        ),
        (&json!(0), &json!(600), &json!(false))
    );
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/boxes/ladder",
            Some(json!({"pause_after_s": 900})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

/// A client written before the sleep ladder sends `idle_timeout_s`: it is still read as
/// `stop_after_s` on create and on update (the new name wins when both are given).
#[tokio::test]
async fn the_old_idle_timeout_name_still_sets_the_stop_rung() {
    let server = TestServer::without_runtime().await;
    let created = create(&server, json!({"name": "old", "idle_timeout_s": 900})).await;
    assert_eq!(created["stop_after_s"], json!(900), "{created}");
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/boxes/old",
            Some(json!({"idle_timeout_s": 1200})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["stop_after_s"], json!(1200), "{body}");
    let (status, body) = server
        .call(
            Method::PATCH,
            "/v1/boxes/old",
            Some(json!({"idle_timeout_s": 60, "stop_after_s": 1800})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["stop_after_s"], json!(1800), "{body}");
}
