//! E2B sandbox lifetimes, enforced by the daemon's lifetime task: at its timeout a sandbox
//! is killed, or paused when made with `autoPause`; deadlines survive a daemon restart. Each
//! test waits for the condition (a one-second timeout, then polling), never a fixed time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::json;

use crate::e2b_control::{
    assert_error, connect, create, e2b, e2b_server, exec_in, info, wait_info,
};
use crate::fake::FakeRuntime;
use crate::harness::TestServer;

#[tokio::test]
async fn a_sandbox_is_killed_at_its_timeout_and_set_timeout_moves_it() {
    let (server, fake) = e2b_server().await;
    let short = create(&server, json!({"templateID": "base", "timeout": 1})).await;
    let kept = create(&server, json!({"templateID": "base", "timeout": 1})).await;
    let (short, kept) = (
        short["sandboxID"].as_str().unwrap(),
        kept["sandboxID"].as_str().unwrap(),
    );
    let (status, _) = e2b(
        &server,
        Method::POST,
        &format!("/sandboxes/{kept}/timeout"),
        Some(json!({"timeout": 600})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    let gone = wait_info(&server, short, "killed", |status, _| {
        status == StatusCode::NOT_FOUND
    })
    .await;
    assert_eq!(gone["code"], 404, "{gone}");
    let (status, _) = server
        .call(Method::GET, &format!("/v1/boxes/{short}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "its box is deleted");
    assert_eq!(fake.removed.lock().unwrap().len(), 1);

    // The other one, whose timeout was moved, still runs.
    let (status, detail) = info(&server, kept).await;
    assert_eq!(
        (status, &detail["state"]),
        (StatusCode::OK, &json!("running"))
    );
}

#[tokio::test]
async fn an_auto_pausing_sandbox_is_paused_at_its_timeout_and_connect_resumes_it() {
    let (server, _fake) = e2b_server().await;
    let created = create(
        &server,
        json!({"templateID": "base", "timeout": 1, "autoPause": true}),
    )
    .await;
    let id = created["sandboxID"].as_str().unwrap();
    let (_, detail) = info(&server, id).await;
    assert_eq!(detail["lifecycle"]["onTimeout"], "pause", "{detail}");

    let paused = wait_info(&server, id, "paused", |status, body| {
        status == StatusCode::OK && body["state"] == "paused"
    })
    .await;
    assert_eq!(paused["pauseMode"], "full", "{paused}");
    let (_, boxed) = server
        .call(Method::GET, &format!("/v1/boxes/{id}"), None)
        .await;
    assert_eq!(boxed["state"], "paused", "{boxed}");
    // Without autoResume, a call does not wake a paused sandbox (as on E2B).
    let (status, out) = exec_in(&server, id).await;
    assert_eq!(status, StatusCode::CONFLICT, "{out}");

    let (status, resumed) = connect(&server, id, 600).await;
    assert_eq!(status, StatusCode::CREATED, "{resumed}");
    let (_, running) = info(&server, id).await;
    assert_eq!(running["state"], "running", "{running}");
}

#[tokio::test]
async fn auto_resume_lets_a_call_wake_a_paused_sandbox() {
    let (server, _fake) = e2b_server().await;
    let created = create(
        &server,
        json!({"templateID": "base", "autoPause": true, "autoResume": {"enabled": true}}),
    )
    .await;
    let id = created["sandboxID"].as_str().unwrap();
    let (status, _) = e2b(
        &server,
        Method::POST,
        &format!("/sandboxes/{id}/pause"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, out) = exec_in(&server, id).await;
    assert_eq!(status, StatusCode::OK, "{out}");
    let (_, detail) = info(&server, id).await;
    assert_eq!(detail["state"], "running", "{detail}");
    assert_eq!(detail["lifecycle"]["autoResume"], true, "{detail}");
}

/// The deadline is in the store: after a restart (which stopped the box), the box is still
/// deleted at it. Without the stored deadline the stopped box would stay for ever.
#[tokio::test]
async fn a_deadline_outlives_a_daemon_restart() {
    let (mut server, _fake) = e2b_server().await;
    let created = create(&server, json!({"templateID": "base", "timeout": 3})).await;
    let id = created["sandboxID"].as_str().unwrap().to_owned();
    server.shut_down().await;
    let data = std::mem::replace(&mut server.data, tempfile::tempdir().unwrap());
    drop(server);

    let fake = Arc::new(FakeRuntime::pausing(data.path().to_owned()));
    let server = TestServer::start(fake, None, data).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = server
            .call(Method::GET, &format!("/v1/boxes/{id}"), None)
            .await;
        if status == StatusCode::NOT_FOUND {
            break;
        }
        assert!(Instant::now() < deadline, "{id} still there: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, gone) = info(&server, &id).await;
    assert_error(status, &gone, StatusCode::NOT_FOUND, &id);
}
