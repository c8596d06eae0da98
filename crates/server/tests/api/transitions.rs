//! Every box transition goes through one guard (`lifecycle/transition.rs`): a step that
//! fails is recorded on the box (`failure`: transition, step, cause, hint) and a boot that
//! succeeds leaves its timings (`last_boot`, and a `boot` event). Against the fake runtime
//! told to fail one call: each kind of transition (start, resume, stop, pause, snapshot,
//! reclaim, claim, forget, fail, exit, reconcile) has its failure recorded, and the next
//! change of the box's state clears it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Method, StatusCode};
use serde_json::{json, Value};

use berth_store::{warm_pool_tenant, BoxState};

use crate::end_to_end::exec;
use crate::fake::FakeRuntime;
use crate::harness::TestServer;
use crate::idle::create;
use crate::messages::crash;
use crate::templates::{reload, write_template};

async fn with(fake: FakeRuntime, data: tempfile::TempDir) -> (TestServer, Arc<FakeRuntime>) {
    let fake = Arc::new(fake);
    (TestServer::start(fake.clone(), None, data).await, fake)
}

async fn fake() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::new(data.path().to_owned());
    with(fake, data).await
}

async fn view(server: &TestServer, name: &str) -> Value {
    let (status, body) = server
        .call(Method::GET, &format!("/v1/boxes/{name}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn call(server: &TestServer, name: &str, verb: &str) -> (StatusCode, Value) {
    server
        .call(Method::POST, &format!("/v1/boxes/{name}/{verb}"), None)
        .await
}

/// The box's failure record says `transition` failed at `step`, for the fake's reason.
fn assert_failure(view: &Value, transition: &str, step: &str) {
    let failure = &view["failure"];
    assert_eq!(failure["transition"], transition, "{view}");
    assert_eq!(failure["step"], step, "{view}");
    let cause = failure["cause"].as_str().unwrap();
    assert!(cause.contains("the fake was told to fail"), "{view}");
    assert!(!failure["hint"].as_str().unwrap().is_empty(), "{view}");
}

/// Polls the box's view until `done` holds of it.
async fn wait_view(server: &TestServer, name: &str, done: impl Fn(&Value) -> bool) -> Value {
    let began = Instant::now();
    loop {
        let view = view(server, name).await;
        if done(&view) {
            return view;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "{view}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_failed_start_is_recorded_and_the_next_start_clears_it() {
    let (server, fake) = fake().await;
    create(&server, json!({"name": "alpha"})).await;
    assert!(view(&server, "alpha").await.get("failure").is_none());
    fake.fail_start.store(true, Ordering::SeqCst);
    let (status, body) = call(&server, "alpha", "start").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let failed = view(&server, "alpha").await;
    assert_eq!(failed["state"], "failed");
    assert_failure(&failed, "start", "runtime_start");
    assert!(failed["failure"]["hint"]
        .as_str()
        .unwrap()
        .contains("/v1/boxes/alpha/start"));
    // The old field says the same cause.
    assert_eq!(failed["state_reason"], failed["failure"]["cause"]);

    let (status, body) = call(&server, "alpha", "start").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "running");
    assert!(body.get("failure").is_none(), "{body}");
}

#[tokio::test]
async fn a_boot_records_the_daemons_steps_and_the_runtimes_phases() {
    let (server, _fake) = fake().await;
    let created = create(&server, json!({"name": "timed"})).await;
    assert!(created.get("last_boot").is_none(), "{created}");
    let (status, started) = call(&server, "timed", "start").await;
    assert_eq!(status, StatusCode::OK, "{started}");
    let boot = &started["last_boot"];
    assert_eq!(boot["restored"], false, "{started}");
    let phases = boot["phases"].as_array().unwrap();
    let named: Vec<(&str, &str)> = phases
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["source"].as_str().unwrap()))
        .collect();
    assert_eq!(
        named,
        [
            ("plan", "daemon"),
            ("rootfs", "daemon"),
            ("egress", "daemon"),
            ("runtime_start", "daemon"),
            ("first_ready", "daemon"),
            ("fake_boot", "runtime"),
        ]
    );
    // The fake's start takes 200 ms: the runtime's step and the total hold it.
    let micros = |name: &str| {
        phases.iter().find(|p| p["name"] == name).unwrap()["micros"]
            .as_u64()
            .unwrap()
    };
    assert!(micros("runtime_start") >= 200_000, "{boot}");
    assert!(micros("runtime_start") >= micros("fake_boot"), "{boot}");
    assert!(boot["total_ms"].as_f64().unwrap() >= 200.0, "{boot}");

    let id = created["id"].as_str().unwrap();
    let (status, page) = server
        .call(
            Method::GET,
            &format!("/v1/boxes/{id}/events?wait=false"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page}");
    let events = page["events"].as_array().unwrap();
    let logged = events
        .iter()
        .find(|e| e["type"] == "boot")
        .unwrap_or_else(|| panic!("no boot event: {page}"));
    assert_eq!(logged["data"]["phases"].as_array().unwrap().len(), 6);
}

#[tokio::test]
async fn a_failed_stop_leaves_the_box_failed_with_the_record() {
    let (server, fake) = fake().await;
    create(&server, json!({"name": "stuck"})).await;
    let (status, body) = call(&server, "stuck", "start").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    fake.fail_stop.store(true, Ordering::SeqCst);
    let (status, body) = call(&server, "stuck", "stop").await;
    assert!(status.is_server_error(), "{status}: {body}");
    let failed = view(&server, "stuck").await;
    assert_eq!(failed["state"], "failed");
    assert_failure(&failed, "stop", "runtime_stop");
    // A second stop succeeds and clears it.
    let (status, body) = call(&server, "stuck", "stop").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], "stopped");
    assert!(body.get("failure").is_none(), "{body}");
}

#[tokio::test]
async fn a_failed_snapshot_is_recorded_and_the_box_runs_on() {
    let data = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::snapshotting(data.path().to_owned());
    let (server, fake) = with(fake, data).await;
    create(&server, json!({"name": "kept", "stop_after_s": 0})).await;
    exec(&server, "kept", &["count"]).await;
    fake.fail_snapshot.store(true, Ordering::SeqCst);
    let (status, body) = call(&server, "kept", "snapshot").await;
    assert!(status.is_server_error(), "{status}: {body}");
    let running = view(&server, "kept").await;
    assert_eq!(running["state"], "running");
    assert_failure(&running, "snapshot", "runtime_snapshot");
    // The same boot answers: its memory is still there.
    let out = exec(&server, "kept", &["count"]).await;
    assert_eq!(out["stdout"].as_str().unwrap().trim(), "2", "{out}");
}

#[tokio::test]
async fn a_reclaim_that_cannot_stop_the_box_is_recorded() {
    let (server, fake) = fake().await;
    create(&server, json!({"name": "idle", "stop_after_s": 1})).await;
    let (status, body) = call(&server, "idle", "start").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    fake.fail_stop.store(true, Ordering::SeqCst);
    let failed = wait_view(&server, "idle", |v| !v["failure"].is_null()).await;
    assert_eq!(failed["state"], "failed");
    assert_failure(&failed, "reclaim", "runtime_stop");
}

#[tokio::test]
async fn a_dead_box_that_cannot_be_cleaned_up_is_recorded() {
    let (server, fake) = fake().await;
    let created = create(&server, json!({"name": "gone", "stop_after_s": 0})).await;
    let (status, body) = call(&server, "gone", "start").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    fake.fail_stop.store(true, Ordering::SeqCst);
    fake.crash(&created["id"].as_str().unwrap().parse().unwrap());
    // The exit watch notices the boot ending; its cleanup fails, and the box is failed
    // with the record (no call is made meanwhile: it would start the box again).
    let failed = wait_view(&server, "gone", |v| !v["failure"].is_null()).await;
    assert_eq!(failed["state"], "failed");
    assert_failure(&failed, "exit", "runtime_stop");
}

#[tokio::test]
async fn a_start_whose_template_is_gone_is_recorded_at_the_plan() {
    let (server, fake) = fake().await;
    write_template(&server, "gone.toml", "name = \"gone\"\n");
    reload(&server).await;
    create(&server, json!({"name": "orphan", "template": "gone"})).await;
    std::fs::remove_file(server.data.path().join("templates/gone.toml")).unwrap();
    reload(&server).await;
    let (status, body) = call(&server, "orphan", "start").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let failed = view(&server, "orphan").await;
    assert_eq!(failed["state"], "failed");
    let failure = &failed["failure"];
    assert_eq!(failure["transition"], "start", "{failed}");
    assert_eq!(failure["step"], "plan", "{failed}");
    assert!(
        failure["cause"]
            .as_str()
            .unwrap()
            .contains("no longer exists"),
        "{failed}"
    );
    assert!(
        failure["hint"].as_str().unwrap().contains("template"),
        "{failed}"
    );
    // Nothing reached the runtime.
    assert_eq!(fake.starts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_restore_is_recorded_as_one() {
    let data = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::snapshotting(data.path().to_owned());
    let (server, _fake) = with(fake, data).await;
    create(&server, json!({"name": "saved", "stop_after_s": 0})).await;
    let (status, started) = call(&server, "saved", "start").await;
    assert_eq!(status, StatusCode::OK, "{started}");
    assert_eq!(started["last_boot"]["restored"], false, "{started}");
    let (status, body) = call(&server, "saved", "snapshot").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, resumed) = call(&server, "saved", "resume").await;
    assert_eq!(status, StatusCode::OK, "{resumed}");
    assert_eq!(resumed["last_boot"]["restored"], true, "{resumed}");
}

/// A running box of its own on a fake that pauses.
async fn pausing(name: &str) -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    let fake = FakeRuntime::pausing(data.path().to_owned());
    let (server, fake) = with(fake, data).await;
    create(&server, json!({"name": name})).await;
    let (status, body) = call(&server, name, "start").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    (server, fake)
}

/// `verb` on the box answers 200 with the box in `state` and no failure on it.
async fn clears(server: &TestServer, name: &str, verb: &str, state: &str) {
    let (status, body) = call(server, name, verb).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["state"], state, "{body}");
    assert!(body.get("failure").is_none(), "{body}");
}

#[tokio::test]
async fn a_failed_pause_is_recorded_and_the_next_pause_clears_it() {
    let (server, fake) = pausing("frozen").await;
    fake.fail_pause.store(true, Ordering::SeqCst);
    let (status, body) = call(&server, "frozen", "pause").await;
    assert!(status.is_server_error(), "{status}: {body}");
    let running = view(&server, "frozen").await;
    assert_eq!(running["state"], "running");
    assert_failure(&running, "pause", "runtime_pause");
    clears(&server, "frozen", "pause", "paused").await;
}

#[tokio::test]
async fn a_failed_resume_is_recorded_as_a_start_and_the_next_resume_clears_it() {
    let (server, fake) = pausing("thawed").await;
    clears(&server, "thawed", "pause", "paused").await;
    fake.fail_resume.store(true, Ordering::SeqCst);
    let (status, body) = call(&server, "thawed", "resume").await;
    assert!(status.is_server_error(), "{status}: {body}");
    let paused = view(&server, "thawed").await;
    assert_eq!(paused["state"], "paused");
    assert_failure(&paused, "start", "runtime_resume");
    clears(&server, "thawed", "resume", "running").await;
}

#[tokio::test]
async fn a_claimed_pool_box_that_cannot_be_handed_over_is_stopped_with_the_record() {
    let (server, fake) = fake().await;
    write_template(&server, "pooled.toml", "name = \"pooled\"\nwarm = 1\n");
    reload(&server).await;
    let began = Instant::now();
    loop {
        let pool = server.store.list_boxes(&warm_pool_tenant()).unwrap();
        if pool.iter().any(|r| r.state == BoxState::Running) {
            break;
        }
        assert!(began.elapsed() < Duration::from_secs(60), "no pool box");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fake.fail_rebind.store(true, Ordering::SeqCst);
    let created = create(&server, json!({"name": "handed", "template": "pooled"})).await;
    // Claimed (no boot of its own), then stopped by the failed handover.
    assert_eq!(created["state"], "stopped", "{created}");
    assert_failure(&created, "claim", "handover");
    assert_failure(&view(&server, "handed").await, "claim", "handover");
    clears(&server, "handed", "start", "running").await;
}

#[tokio::test]
async fn a_dead_box_a_call_cannot_clean_up_is_recorded_and_the_next_call_clears_it() {
    let (server, fake) = fake().await;
    // The runtime is slow to see the box die: the call finds it first.
    fake.unseen_exits.store(true, Ordering::SeqCst);
    let created = create(&server, json!({"name": "lost", "stop_after_s": 0})).await;
    exec(&server, "lost", &["count"]).await;
    fake.fail_stop.store(true, Ordering::SeqCst);
    fake.crash(&created["id"].as_str().unwrap().parse().unwrap());
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes/lost/exec",
            Some(json!({"cmd": ["count"]})),
        )
        .await;
    assert!(status.is_server_error(), "{status}: {body}");
    assert_failure(&view(&server, "lost").await, "forget", "runtime_stop");
    // The next call stops what is left and boots the box afresh.
    let out = exec(&server, "lost", &["count"]).await;
    assert_eq!(out["stdout"].as_str().unwrap().trim(), "1", "{out}");
    let running = view(&server, "lost").await;
    assert_eq!(running["state"], "running");
    assert!(running.get("failure").is_none(), "{running}");
}

#[tokio::test]
async fn a_harness_that_gave_up_fails_the_box_with_the_record() {
    let (server, fake) = fake().await;
    create(&server, json!({"name": "quitter", "stop_after_s": 0})).await;
    let (status, body) = call(&server, "quitter", "start").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    fake.harness.emit(
        "harness_failed",
        json!({"reason": "it exited 5 times in a row"}),
    );
    let failed = wait_view(&server, "quitter", |v| v["state"] == "failed").await;
    let failure = &failed["failure"];
    assert_eq!(failure["transition"], "fail", "{failed}");
    assert_eq!(failure["step"], "harness", "{failed}");
    assert_eq!(
        failure["cause"],
        "the harness gave up: it exited 5 times in a row"
    );
    assert!(
        failure["hint"].as_str().unwrap().contains("harness"),
        "{failed}"
    );
    assert_eq!(failed["state_reason"], failure["cause"]);
    clears(&server, "quitter", "start", "running").await;

    // A failed box whose processes cannot be stopped says that instead.
    fake.fail_stop.store(true, Ordering::SeqCst);
    fake.harness
        .emit("harness_failed", json!({"reason": "again"}));
    let failed = wait_view(&server, "quitter", |v| v["state"] == "failed").await;
    assert_failure(&failed, "fail", "runtime_stop");
}

#[tokio::test]
async fn a_box_reconcile_cannot_stop_is_recorded_and_a_start_clears_it() {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    let first = TestServer::start(fake.clone(), None, data).await;
    let created = create(&first, json!({"name": "left", "stop_after_s": 0})).await;
    let (status, body) = call(&first, "left", "start").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let data = crash(first).await;
    // Its agent died with the daemon (no reattach), and the runtime cannot stop it.
    fake.crash(&created["id"].as_str().unwrap().parse().unwrap());
    fake.fail_stop.store(true, Ordering::SeqCst);
    let second = TestServer::start(fake.clone(), None, data).await;
    let failed = wait_view(&second, "left", |v| !v["failure"].is_null()).await;
    assert_eq!(failed["state"], "failed");
    assert_failure(&failed, "reconcile", "runtime_stop");
    clears(&second, "left", "start", "running").await;
}
