//! The daemon's side of snapshots: a snapshotted box holds no running agent, the next call
//! restores it with its memory (a counter the agent keeps only in memory) and a fresh boot
//! token, the egress CA the box already trusts, and the ladder's snapshot and stop rungs.
//! The runtime is the fake's snapshotting mode ([`FakeRuntime::snapshotting`]), so these
//! are the daemon's logic in milliseconds; a real qemu snapshot and restore is the runtime
//! conformance suite's (`qemu::a_snapshot_keeps_processes_and_memory_…`) and the CLI's
//! (`qemu_snapshot.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::end_to_end::exec;
use crate::fake::FakeRuntime;
use crate::harness::TestServer;
use crate::idle::{create, state, wait_state};

async fn snapshotting() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::snapshotting(data.path().to_owned()));
    (TestServer::start(fake.clone(), None, data).await, fake)
}

/// The counter the box's agent keeps in memory, after one more count.
async fn count(server: &TestServer, name: &str) -> u64 {
    let out = exec(server, name, &["count"]).await;
    out["stdout"].as_str().unwrap().trim().parse().unwrap()
}

async fn post(server: &TestServer, name: &str, verb: &str) -> Value {
    let (status, body) = server
        .call(Method::POST, &format!("/v1/boxes/{name}/{verb}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{verb}: {body}");
    body
}

/// A box whose egress has a credential rule, so its boots carry an interception CA.
async fn create_with_credential(server: &TestServer, name: &str, extra: Value) {
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/secrets",
            Some(json!({"name": "anthropic", "value": "sk-test"})),
        )
        .await;
    assert!(
        status == StatusCode::CREATED || status == StatusCode::OK,
        "{body}"
    );
    let mut body = json!({
        "name": name,
        "stop_after_s": 0,
        "egress": {
            "allow": ["api.anthropic.com"],
            "credentials": [{
                "name": "anthropic",
                "hosts": ["api.anthropic.com"],
                "header": "x-api-key",
                "placeholder_env": "ANTHROPIC_API_KEY"
            }]
        }
    });
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    create(server, body).await;
}

#[tokio::test]
async fn a_snapshotted_box_holds_no_agent_and_wakes_with_its_memory_a_new_token_and_its_ca() {
    let (server, fake) = snapshotting().await;
    create_with_credential(&server, "saved", json!({})).await;
    assert_eq!(count(&server, "saved").await, 1);
    assert_eq!(count(&server, "saved").await, 2);

    let view = post(&server, "saved", "snapshot").await;
    assert_eq!(view["state"], "snapshotted", "{view}");
    assert_eq!(view["snapshot_bytes"], 4096, "{view}");
    assert!(
        view.get("memory_bytes").is_none(),
        "a snapshot holds no memory: {view}"
    );
    let id: berth_protocol::BoxId = view["id"].as_str().unwrap().parse().unwrap();
    use berth_runtime::Runtime;
    assert_eq!(
        fake.status(&id).await.unwrap(),
        berth_runtime::RuntimeStatus::Stopped,
        "nothing of the box runs"
    );
    // A second snapshot of a snapshotted box is a no-op, not an error.
    assert_eq!(
        post(&server, "saved", "snapshot").await["state"],
        "snapshotted"
    );

    // The next call restores it: the counter goes on, under a new boot token.
    assert_eq!(count(&server, "saved").await, 3, "the memory came back");
    assert_eq!(state(&server, "saved").await, "running");
    assert_eq!(fake.restores.load(Ordering::SeqCst), 1);
    assert_eq!(fake.starts.load(Ordering::SeqCst), 1, "no cold boot");
    let tokens = fake.tokens.lock().unwrap().clone();
    let old = fake.channel(&id, &token_of(&tokens[0]));
    assert!(
        old.info().await.is_err(),
        "the snapshotted boot's token is refused"
    );
    // The restored boot trusts the same CA the box was given at its cold start.
    let cas = fake.cas.lock().unwrap().clone();
    assert_eq!(cas.len(), 2, "a start and a restore");
    assert!(cas[0].is_some(), "the box has an interception CA");
    assert_eq!(cas[1], cas[0], "the restore keeps the CA the box trusts");

    // A stop deletes the snapshot rung: the next wake is cold and the memory is gone.
    post(&server, "saved", "snapshot").await;
    post(&server, "saved", "stop").await;
    assert_eq!(
        fake.discarded.lock().unwrap().len(),
        1,
        "the stop dropped the snapshot"
    );
    assert_eq!(
        count(&server, "saved").await,
        1,
        "a cold boot starts from nothing"
    );
    assert_eq!(fake.starts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_restore_that_fails_boots_the_box_cold_and_the_ladder_snapshots_then_stops() {
    let (server, fake) = snapshotting().await;
    create_with_credential(&server, "fragile", json!({})).await;
    assert_eq!(count(&server, "fragile").await, 1);
    post(&server, "fragile", "snapshot").await;
    fake.fail_restore.store(true, Ordering::SeqCst);
    assert_eq!(
        count(&server, "fragile").await,
        1,
        "cold: the memory is gone"
    );
    assert_eq!(state(&server, "fragile").await, "running");
    assert_eq!(fake.starts.load(Ordering::SeqCst), 2);
    assert_eq!(
        fake.discarded.lock().unwrap().len(),
        1,
        "the snapshot that did not restore is deleted"
    );

    create_with_credential(
        &server,
        "ladder",
        json!({"snapshot_after_s": 1, "stop_after_s": 3}),
    )
    .await;
    assert_eq!(count(&server, "ladder").await, 1);
    wait_state(&server, "ladder", "snapshotted", Duration::from_secs(30)).await;
    wait_state(&server, "ladder", "stopped", Duration::from_secs(30)).await;
    let (_, view) = server.call(Method::GET, "/v1/boxes/ladder", None).await;
    assert!(view.get("snapshot_bytes").is_none(), "{view}");
}

fn token_of(hex: &str) -> berth_runtime::BootToken {
    let mut bytes = [0u8; 32];
    for (i, byte) in bytes.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    berth_runtime::BootToken::from_random(bytes)
}
