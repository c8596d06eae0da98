//! A box's services through the API, against the fake runtime (whose agent runs the
//! template's services from the start, each with a one-line log): the list of a box that is
//! not running is its template's, `stopped`, without waking it; logs need the box running;
//! a restart wakes it; unknown names are 404 before anything is woken.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::fake::FakeRuntime;
use crate::harness::{error_code, TestServer};

const TEMPLATE: &str = r#"name = "svc"
base = "host"

[[services]]
name = "db"
command = ["db"]

[[services]]
name = "web"
command = ["web"]
after = ["db"]
keep_awake = true
"#;

/// A daemon on the pausing fake, with the `svc` template and a box `s1` of it (stopped).
async fn with_service_box() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("templates")).unwrap();
    std::fs::write(data.path().join("templates/svc.toml"), TEMPLATE).unwrap();
    let fake = Arc::new(FakeRuntime::pausing(data.path().to_owned()));
    let server = TestServer::start(fake.clone(), None, data).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "s1", "template": "svc"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    (server, fake)
}

/// `GET …/logs?…` of `s1`: the status, and the frames (or the error body's one value).
async fn logs(server: &TestServer, service: &str, query: &str) -> (StatusCode, Vec<Value>) {
    let path = format!("/v1/boxes/s1/services/{service}/logs?{query}");
    let key = server.key.clone();
    let (status, _, body) = server
        .raw(Method::GET, &path, Some(&key), &[], Bytes::new())
        .await;
    let values = body
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    (status, values)
}

#[tokio::test]
async fn a_sleeping_box_lists_its_templates_services_stopped_without_waking() {
    let (server, fake) = with_service_box().await;
    let (status, list) = server
        .call(Method::GET, "/v1/boxes/s1/services", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(
        list,
        json!({"services": [
            {"name": "db", "state": "stopped", "pid": null, "restarts": 0,
             "started_at_ms": null, "ready_at_ms": null, "last_exit": null, "log_end": 0,
             "keep_awake": false, "after": []},
            {"name": "web", "state": "stopped", "pid": null, "restarts": 0,
             "started_at_ms": null, "ready_at_ms": null, "last_exit": null, "log_end": 0,
             "keep_awake": true, "after": ["db"]},
        ]})
    );
    // Logs: an unknown name is 404, a known one 409 with what to do.
    let (status, body) = logs(&server, "nope", "").await;
    assert_eq!(
        (status, error_code(&body[0])),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let (status, body) = logs(&server, "web", "").await;
    assert_eq!(
        (status, error_code(&body[0])),
        (StatusCode::CONFLICT, "conflict")
    );
    let message = body[0]["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("logs begin at its next start"),
        "{message}"
    );
    // A restart of a name the template lacks wakes nothing.
    let (status, body) = server
        .call(Method::POST, "/v1/boxes/s1/services/nope/restart", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(fake.starts.load(Ordering::SeqCst), 0, "nothing was woken");
    let (_, s1) = server.call(Method::GET, "/v1/boxes/s1", None).await;
    assert_eq!(s1["state"], "stopped");
}

#[tokio::test]
async fn a_restart_wakes_the_box_and_a_running_box_answers_from_its_agent() {
    let (server, fake) = with_service_box().await;
    let (status, web) = server
        .call(Method::POST, "/v1/boxes/s1/services/web/restart", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{web}");
    assert_eq!((&web["name"], &web["restarts"]), (&json!("web"), &json!(1)));
    assert_eq!(fake.starts.load(Ordering::SeqCst), 1);

    let (status, list) = server
        .call(Method::GET, "/v1/boxes/s1/services", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let states: Vec<(&str, &str, u64)> = list["services"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["state"].as_str().unwrap(),
                s["restarts"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(states, [("db", "running", 0), ("web", "running", 1)]);

    let (status, frames) = logs(&server, "web", "offset=6&follow=false").await;
    assert_eq!(status, StatusCode::OK, "{frames:?}");
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(
        (&frames[0]["type"], &frames[0]["offset"]),
        (&json!("output"), &json!(6))
    );
    // The agent's own 404 for a name it does not know comes through as it said it.
    let (status, body) = logs(&server, "nope", "").await;
    assert_eq!(
        (status, body[0]["error"]["message"].as_str()),
        (StatusCode::NOT_FOUND, Some("no service \"nope\""))
    );
    // A bad query is the caller's.
    let (status, _) = logs(&server, "web", "offset=x").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_paused_box_is_not_asked_and_its_logs_wait_for_it_to_run() {
    let (server, fake) = with_service_box().await;
    let (status, body) = server.call(Method::POST, "/v1/boxes/s1/start", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = server.call(Method::POST, "/v1/boxes/s1/pause", None).await;
    assert_eq!((status, &body["state"]), (StatusCode::OK, &json!("paused")));

    let (status, list) = server
        .call(Method::GET, "/v1/boxes/s1/services", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
    assert_eq!(list["services"][0]["state"], "stopped", "{list}");
    let (status, body) = logs(&server, "db", "").await;
    assert_eq!(status, StatusCode::CONFLICT);
    let message = body[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("resume it"), "{message}");
    let (_, s1) = server.call(Method::GET, "/v1/boxes/s1", None).await;
    assert_eq!(s1["state"], "paused", "listing did not wake it");
    assert_eq!(fake.starts.load(Ordering::SeqCst), 1);
}
