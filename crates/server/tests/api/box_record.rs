//! `PATCH /v1/boxes/{ref}` and `GET /v1/boxes?label=&state=` against the fake runtime:
//! labels, env, idle timeout and limits change, bad input is refused with a clear 400, a
//! tenant changes only its own boxes, and an open event stream does not keep a box awake.

use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{error_code, TestServer};
use crate::idle::{create, state, stays, wait_state, with_fake};
use crate::sse::open_sse;
use crate::tenants::{call_as, new_tenant};

async fn patch(server: &TestServer, name: &str, body: Value) -> (StatusCode, Value) {
    server
        .call(Method::PATCH, &format!("/v1/boxes/{name}"), Some(body))
        .await
}

async fn names(server: &TestServer, query: &str) -> Vec<String> {
    let (status, body) = server
        .call(Method::GET, &format!("/v1/boxes{query}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{query}: {body}");
    body["boxes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn labels_and_env_are_set_at_create_replaced_by_patch_and_filter_the_list() {
    let (server, _fake) = with_fake().await;
    let a = create(
        &server,
        json!({"name": "a", "labels": {"team": "red", "tier": "1"}, "env": {"GREETING": "hi"}}),
    )
    .await;
    assert_eq!(a["labels"], json!({"team": "red", "tier": "1"}));
    assert_eq!(a["env"], json!({"GREETING": "hi"}));
    create(&server, json!({"name": "b", "labels": {"team": "blue"}})).await;
    create(&server, json!({"name": "c"})).await;

    assert_eq!(names(&server, "?label=team=red").await, ["a"]);
    assert_eq!(names(&server, "?label=team=red&label=tier=1").await, ["a"]);
    assert!(names(&server, "?label=team=red&label=tier=2")
        .await
        .is_empty());
    assert_eq!(names(&server, "").await, ["a", "b", "c"]);

    // The given map replaces the labels whole; absent fields stay.
    let (status, b) = patch(&server, "b", json!({"labels": {"team": "red"}})).await;
    assert_eq!(status, StatusCode::OK, "{b}");
    assert_eq!(b["labels"], json!({"team": "red"}));
    assert_eq!(names(&server, "?label=team=red").await, ["a", "b"]);
    let (status, a) = patch(&server, "a", json!({"labels": {}, "env": {"X": "1"}})).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!((&a["labels"], &a["env"]), (&json!({}), &json!({"X": "1"})));
    let (_, shown) = server.call(Method::GET, "/v1/boxes/a", None).await;
    assert_eq!(shown["env"], json!({"X": "1"}));

    // The state filter.
    let (status, _) = server.call(Method::POST, "/v1/boxes/c/start", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&server, "?state=running").await, ["c"]);
    assert_eq!(names(&server, "?state=stopped&label=team=red").await, ["b"]);
}

#[tokio::test]
async fn bad_changes_and_filters_are_400_and_change_nothing() {
    let (server, _fake) = with_fake().await;
    create(&server, json!({"name": "a", "labels": {"keep": "me"}})).await;
    for bad in [
        json!({"labels": {"a=b": "v"}}),
        json!({"labels": {"k": "line\nbreak"}}),
        json!({"labels": {"k": 1}}),
        json!({"env": {"1X": "v"}}),
        json!({"env": {"X": "a\u{0}b"}}),
        json!({"env": {"HTTPS_PROXY": "http://elsewhere"}}),
        json!({"stop_after_s": 604_801}),
        json!({"pause_after_s": 400}),
        json!({"limits": {"memory_mib": 1}}),
        json!({"limits": {"vcpus": 1}}),
        json!({"disk_mib": 10}),
        json!({"name": "renamed"}),
        json!({"labels": {"k": "v"}, "extra": true}),
    ] {
        let (status, body) = patch(&server, "a", bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(error_code(&body), "invalid_request", "{bad}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    let (_, a) = server.call(Method::GET, "/v1/boxes/a", None).await;
    assert_eq!(a["labels"], json!({"keep": "me"}));
    assert_eq!(a["stop_after_s"], 300);

    // Creation checks the same rules.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "b", "env": {"A-B": "v"}})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("A-B"),
        "{body}"
    );

    for query in [
        "?label=team",
        "?state=asleep",
        "?state=deleted",
        "?name=a",
        "?label=a=1&label=a=2",
    ] {
        let (status, body) = server
            .call(Method::GET, &format!("/v1/boxes{query}"), None)
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert_eq!(error_code(&body), "invalid_request");
    }
}

#[tokio::test]
async fn a_tenant_changes_only_its_own_boxes() {
    let (server, _fake) = with_fake().await;
    create(&server, json!({"name": "mine"})).await;
    let other = new_tenant(&server, "acme").await;
    let (status, body) = call_as(
        &server,
        &other,
        Method::PATCH,
        "/v1/boxes/mine",
        Some(json!({"labels": {"owner": "acme"}})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (_, mine) = server.call(Method::GET, "/v1/boxes/mine", None).await;
    assert_eq!(mine["labels"], json!({}));
    // Its list filters see only its own boxes.
    let (status, body) = call_as(
        &server,
        &other,
        Method::GET,
        "/v1/boxes?state=stopped",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["boxes"], json!([]));
}

#[tokio::test]
async fn limits_wait_for_the_next_start_while_the_box_runs() {
    let (server, _fake) = with_fake().await;
    create(&server, json!({"name": "a", "limits": {"memory_mib": 256}})).await;
    // Stopped: the change is the box's limits at once.
    let (status, a) = patch(&server, "a", json!({"limits": {"pids": 100}})).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!(
        a["limits"],
        json!({"memory_mib": 256, "pids": 100, "cpus": 1.0})
    );
    assert!(a.get("pending_limits").is_none(), "{a}");

    let (status, _) = server.call(Method::POST, "/v1/boxes/a/start", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, a) = patch(&server, "a", json!({"limits": {"memory_mib": 512}})).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!(
        a["limits"]["memory_mib"], 256,
        "the running boot keeps its limits"
    );
    assert_eq!(
        a["pending_limits"],
        json!({"memory_mib": 512, "pids": 100, "cpus": 1.0})
    );
    // A second change builds on what is pending.
    let (_, a) = patch(&server, "a", json!({"limits": {"cpus": 2.0}})).await;
    assert_eq!(
        a["pending_limits"],
        json!({"memory_mib": 512, "pids": 100, "cpus": 2.0})
    );

    let (status, _) = server.call(Method::POST, "/v1/boxes/a/stop", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, a) = server.call(Method::POST, "/v1/boxes/a/start", None).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!(
        a["limits"],
        json!({"memory_mib": 512, "pids": 100, "cpus": 2.0})
    );
    assert!(a.get("pending_limits").is_none(), "{a}");
}

#[tokio::test]
async fn a_disk_only_grows() {
    let (server, _fake) = with_fake().await;
    create(&server, json!({"name": "a", "disk_mib": 2048})).await;
    let (status, body) = patch(&server, "a", json!({"disk_mib": 1024})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("only grows"),
        "{body}"
    );
    let (status, a) = patch(&server, "a", json!({"disk_mib": 4096})).await;
    assert_eq!(status, StatusCode::OK, "{a}");
    assert_eq!(
        (&a["disk_mib"], &a["disk_source"]),
        (&json!(4096), &json!("box"))
    );
}

#[tokio::test]
async fn a_shorter_idle_timeout_applies_to_a_running_box_at_once() {
    let (server, _fake) = with_fake().await;
    create(&server, json!({"name": "a"})).await;
    let (status, _) = server.call(Method::POST, "/v1/boxes/a/start", None).await;
    assert_eq!(status, StatusCode::OK);
    stays(&server, "a", "running", Duration::from_millis(1500)).await;
    let (status, a) = patch(&server, "a", json!({"stop_after_s": 1})).await;
    assert_eq!((status, &a["stop_after_s"]), (StatusCode::OK, &json!(1)));
    wait_state(&server, "a", "stopped", Duration::from_secs(10)).await;
}

#[tokio::test]
async fn an_open_event_stream_does_not_keep_a_box_awake() {
    let (server, _fake) = with_fake().await;
    watched_box_idles_out(&server, json!({"name": "watched", "stop_after_s": 1})).await;
}

/// Creates and starts the box `create_body` describes, holds its event stream open, and
/// checks that the box is reclaimed anyway and that the stream shows the stop.
pub(crate) async fn watched_box_idles_out(server: &TestServer, create_body: Value) {
    let name = create_body["name"].as_str().unwrap().to_owned();
    create(server, create_body).await;
    let (status, body) = server
        .call(Method::POST, &format!("/v1/boxes/{name}/start"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, mut sse) = open_sse(server, &format!("/v1/boxes/{name}/events"), &[]).await;
    assert_eq!(status, StatusCode::OK);
    wait_state(server, &name, "stopped", Duration::from_secs(30)).await;
    // The stream stays open and tells its watcher: the reclaim's state events arrive.
    let mut states = Vec::new();
    while states.last().map(String::as_str) != Some("stopped") {
        let event = sse.next().await;
        if event.event == "state" {
            states.push(event.data["data"]["state"].as_str().unwrap().to_owned());
        }
    }
    assert!(
        states.ends_with(&["stopping".into(), "stopped".into()]),
        "{states:?}"
    );
    assert_eq!(state(server, &name).await, "stopped");
}
