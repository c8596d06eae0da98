//! No box stays awake forever by mistake: a harness that answers without replaying the
//! message (ack = "replay") and one that never says `result` both let their box sleep.
//! Real boxes: the sandbox runtime, berth-init and the echo harness in its quiet modes.

use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::end_to_end::with_sandbox;
use crate::harness::TestServer;
use crate::idle::wait_state;
use crate::messages::wait_events;
use crate::talk::post;

/// A template `name` running the echo harness with `env`, turns ending after
/// `turn_timeout_s`.
async fn quiet_template(server: &TestServer, name: &str, env: &str, turn_timeout_s: u64) {
    let dir = server.data.path().join("templates");
    std::fs::create_dir_all(&dir).unwrap();
    let layer = server.data.path().join("layers").join("echo");
    let text = format!(
        r#"name = "{name}"
base = "host"

[[layers]]
source = "{}"
target = "/opt/harness"

[harness]
command = ["/opt/harness/bin/echo-harness"]
resume_args = ["--resume", "{{session}}"]
env = {{ {env} }}
turn_timeout_s = {turn_timeout_s}
"#,
        layer.display()
    );
    std::fs::write(dir.join(format!("{name}.toml")), text).unwrap();
    let (status, body) = server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["errors"], json!([]), "{body}");
}

async fn create(server: &TestServer, name: &str, template: &str) {
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": name, "template": template, "stop_after_s": 2})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

async fn view(server: &TestServer, name: &str) -> Value {
    let (status, body) = server
        .call(Method::GET, &format!("/v1/boxes/{name}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn message_state(server: &TestServer, name: &str, id: &str) -> String {
    let (status, body) = server
        .call(Method::GET, &format!("/v1/boxes/{name}/messages"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let messages = body["messages"].as_array().unwrap();
    let m = messages.iter().find(|m| m["id"] == id).unwrap();
    m["state"].as_str().unwrap().to_owned()
}

async fn wait_message_state(server: &TestServer, name: &str, id: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = message_state(server, name, id).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "{id} still {now}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The texts of the harness's answers.
pub(crate) fn answers(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "assistant")
        .filter_map(|e| e["data"]["message"]["content"][0]["text"].as_str())
        .map(str::to_owned)
        .collect()
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

#[tokio::test]
async fn a_result_acknowledges_a_message_the_harness_never_replayed_and_the_box_sleeps() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    quiet_template(&server, "quiet", r#"ECHO_HARNESS_NO_REPLAY = "1""#, 1800).await;
    create(&server, "quiet", "quiet").await;
    // A turn of two seconds: long enough to see it in the box view.
    let posted = post(&server, "quiet", "sleep 2000").await;
    let id = posted["id"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let body = view(&server, "quiet").await;
        let reasons = body["awake_because"].as_array().unwrap();
        if reasons.contains(&json!({"kind": "message", "id": id})) {
            break;
        }
        assert_eq!(
            message_state(&server, "quiet", &id).await,
            "queued",
            "the turn ended before the view showed it: {body}"
        );
        assert!(Instant::now() < deadline, "never listed: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The turn's `result` acknowledges the message: delivered, not redelivered, no replay.
    wait_message_state(&server, "quiet", &id, "delivered").await;
    let events = wait_events(&server, "quiet", |e| count(e, "result") == 1).await;
    assert_eq!(
        count(&events, "user"),
        0,
        "the harness replayed: {events:?}"
    );
    assert_eq!(answers(&events), ["echo: sleep 2000"]);
    let body = view(&server, "quiet").await;
    assert!(
        !body["awake_because"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "message"),
        "{body}"
    );
    // Nothing keeps the box up any more: its 2 s idle timeout stops it.
    wait_state(&server, "quiet", "stopped", Duration::from_secs(60)).await;
    assert_eq!(view(&server, "quiet").await["awake_because"], json!([]));
    server.shut_down().await;
}

#[tokio::test]
async fn a_turn_without_a_result_ends_at_its_timeout_and_is_not_redelivered() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    quiet_template(
        &server,
        "mute",
        r#"ECHO_HARNESS_NO_REPLAY = "1", ECHO_HARNESS_NO_RESULT = "1""#,
        3,
    )
    .await;
    create(&server, "mute", "mute").await;
    let posted = post(&server, "mute", "hello").await;
    let id = posted["id"].as_str().unwrap().to_owned();
    // The timeout acknowledges the message: delivered without a replay or a result.
    wait_message_state(&server, "mute", &id, "delivered").await;
    let events = wait_events(&server, "mute", |e| count(e, "turn_timeout") == 1).await;
    let timeout = events.iter().find(|e| e["type"] == "turn_timeout").unwrap();
    assert_eq!(timeout["data"]["message_id"], id.as_str(), "{timeout}");
    assert!(
        timeout["data"]["after_s"].as_u64().unwrap() >= 3,
        "{timeout}"
    );
    assert_eq!(count(&events, "result"), 0);
    wait_state(&server, "mute", "stopped", Duration::from_secs(60)).await;

    // The next message wakes the box; the timed-out one is not written to the harness
    // again (it would come first and be answered twice).
    let again = post(&server, "mute", "again").await;
    let again_id = again["id"].as_str().unwrap().to_owned();
    wait_message_state(&server, "mute", &again_id, "delivered").await;
    let events = wait_events(&server, "mute", |e| count(e, "turn_timeout") == 2).await;
    assert_eq!(
        answers(&events),
        ["echo: hello", "echo: again"],
        "{events:?}"
    );
    let second = events
        .iter()
        .filter(|e| e["type"] == "turn_timeout")
        .nth(1)
        .unwrap();
    assert_eq!(second["data"]["message_id"], again_id.as_str());
    wait_state(&server, "mute", "stopped", Duration::from_secs(60)).await;
    server.shut_down().await;
}

#[tokio::test]
async fn a_replayed_turn_that_never_ends_stops_keeping_the_box_awake_at_its_timeout() {
    let Some(mut server) = with_sandbox().await else {
        return;
    };
    quiet_template(&server, "endless", r#"ECHO_HARNESS_NO_RESULT = "1""#, 3).await;
    create(&server, "endless", "endless").await;
    let posted = post(&server, "endless", "hello").await;
    let id = posted["id"].as_str().unwrap().to_owned();
    // The replay acknowledges the message at once; the turn it starts never ends by itself.
    wait_message_state(&server, "endless", &id, "delivered").await;
    let events = wait_events(&server, "endless", |e| count(e, "user") == 1).await;
    assert_eq!(count(&events, "turn_timeout"), 0, "{events:?}");
    wait_state(&server, "endless", "stopped", Duration::from_secs(60)).await;
    let events = wait_events(&server, "endless", |e| count(e, "turn_timeout") == 1).await;
    let timeout = events.iter().find(|e| e["type"] == "turn_timeout").unwrap();
    assert_eq!(timeout["data"]["message_id"], id.as_str(), "{timeout}");
    assert_eq!(count(&events, "result"), 0);
    // The turn kept the box up until it timed out: the reclaim came after, not before.
    let stopping = events
        .iter()
        .find(|e| e["type"] == "state" && e["data"]["state"] == "stopping")
        .unwrap();
    assert!(
        stopping["seq"].as_u64() > timeout["seq"].as_u64(),
        "{events:?}"
    );
    server.shut_down().await;
}
