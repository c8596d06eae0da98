//! Several runtimes in one daemon: a box's runtime is chosen at creation, stored, shown and
//! used for its whole life; unknown and unavailable runtimes are refused; `GET
//! /v1/runtimes`; `disk_mib`; template bases vs runtimes. Two fakes stand in: `fake` (a
//! sandbox-like runtime, the default) and one named `qemu` (a VM runtime: image bases).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_runtime::Rootfs;
use berth_server::{RuntimeEntry, Runtimes};
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::fake::FakeRuntime;
use crate::harness::{error_code, TestServer};

struct Daemon {
    server: TestServer,
    sandbox: Arc<FakeRuntime>,
    vm: Arc<FakeRuntime>,
}

/// `fake` (default) and `qemu` ready, `firecracker` unavailable.
async fn daemon() -> Daemon {
    let data = tempfile::tempdir().unwrap();
    let sandbox = Arc::new(FakeRuntime::new(data.path().to_owned()));
    let vm = Arc::new(FakeRuntime::named(data.path().to_owned(), "qemu"));
    let runtimes = Runtimes::new(
        vec![
            RuntimeEntry::ready(sandbox.clone(), None),
            RuntimeEntry::ready(vm.clone(), Some(json!({"accel": {"accel": "tcg"}}))),
            RuntimeEntry::unavailable("firecracker", "no firecracker binary"),
        ],
        "fake",
    )
    .unwrap();
    let server = TestServer::start_with(runtimes, None, data).await;
    Daemon {
        server,
        sandbox,
        vm,
    }
}

/// `POST /v1/boxes` with `body`, asserted created; the box.
async fn create_box(server: &TestServer, body: Value) -> Value {
    let (status, answer) = server.call(Method::POST, "/v1/boxes", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    answer
}

/// `POST /v1/boxes` with `body`, asserted refused as a bad request whose message says
/// `needle`; the answer.
async fn create_refused(server: &TestServer, body: Value, needle: &str) -> Value {
    let (status, answer) = server.call(Method::POST, "/v1/boxes", Some(body)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains(needle), "{message}");
    answer
}

/// A `dir:` template over a small tree (built into a real ext4 image at the first start).
fn dir_template(server: &TestServer, disk_mib: Option<u64>) -> std::path::PathBuf {
    let tree = server.data.path().join("tree");
    std::fs::create_dir_all(tree.join("etc")).unwrap();
    std::fs::write(tree.join("etc/motd"), "hello\n").unwrap();
    let dir = server.data.path().join("templates");
    std::fs::create_dir_all(&dir).unwrap();
    let disk = disk_mib
        .map(|d| format!("disk_mib = {d}\n"))
        .unwrap_or_default();
    std::fs::write(
        dir.join("tree.toml"),
        format!("name = \"tree\"\nbase = \"dir:{}\"\n{disk}", tree.display()),
    )
    .unwrap();
    tree
}

#[tokio::test]
async fn get_runtimes_lists_each_with_its_state() {
    let mut d = daemon().await;
    let (status, body) = d.server.call(Method::GET, "/v1/runtimes", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"runtimes": [
            {"name": "fake", "available": true, "reason": null, "default": true, "details": null,
             "capabilities": {"pause": false, "snapshot": false, "host_rootfs": true}},
            {"name": "qemu", "available": true, "reason": null, "default": false,
             "details": {"accel": {"accel": "tcg"}},
             "capabilities": {"pause": false, "snapshot": false, "host_rootfs": false}},
            {"name": "firecracker", "available": false, "reason": "no firecracker binary",
             "default": false, "details": null,
             "capabilities": {"pause": true, "snapshot": true, "host_rootfs": false}},
        ]})
    );
    d.server.shut_down().await;
}

#[tokio::test]
async fn a_box_runs_on_the_runtime_it_was_created_with() {
    let mut d = daemon().await;
    dir_template(&d.server, Some(256));
    let (status, body) = d
        .server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["errors"], json!([]), "{body}");

    let plain = create_box(&d.server, json!({"name": "plain"})).await;
    assert_eq!(plain["runtime"], "fake");
    assert_eq!(
        (&plain["disk_mib"], &plain["disk_source"]),
        (&json!(1024), &json!("template"))
    );
    let vm = create_box(
        &d.server,
        json!({"name": "vm", "runtime": "qemu", "template": "tree"}),
    )
    .await;
    assert_eq!(vm["runtime"], "qemu");
    assert_eq!(vm["disk_mib"], 256, "the template's disk_mib");

    for name in ["plain", "vm"] {
        let (status, body) = d
            .server
            .call(Method::POST, &format!("/v1/boxes/{name}/start"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    assert_eq!(d.sandbox.starts.load(Ordering::SeqCst), 1);
    assert_eq!(d.vm.starts.load(Ordering::SeqCst), 1);
    assert_eq!(d.sandbox.specs.lock().unwrap()[0], (Rootfs::Host, 1024));
    let (rootfs, disk) = d.vm.specs.lock().unwrap()[0].clone();
    assert_eq!(disk, 256);
    let Rootfs::Image(image) = rootfs else {
        panic!("the VM got {rootfs:?}, not an image")
    };
    assert!(
        image.starts_with(d.server.data.path().join("images/rootfs")),
        "{image:?}"
    );
    assert!(image.is_file(), "{image:?}");

    // Stop goes to the box's own runtime too.
    let (status, body) = d.server.call(Method::POST, "/v1/boxes/vm/stop", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(d.vm.stopped.lock().unwrap().len(), 1);
    assert!(d.sandbox.stopped.lock().unwrap().is_empty());
    d.server.shut_down().await;
}

#[tokio::test]
async fn unknown_and_unavailable_runtimes_are_refused_at_creation() {
    let mut d = daemon().await;
    for (runtime, needle) in [
        ("kvm", "unknown runtime \"kvm\""),
        ("firecracker", "no firecracker binary"),
    ] {
        let body =
            create_refused(&d.server, json!({"name": "a", "runtime": runtime}), needle).await;
        assert_eq!(error_code(&body), "invalid_request");
    }
    let (_, list) = d.server.call(Method::GET, "/v1/boxes", None).await;
    assert_eq!(list["boxes"], json!([]));
    d.server.shut_down().await;
}

#[tokio::test]
async fn disk_mib_is_validated_and_shown() {
    let mut d = daemon().await;
    for bad in [0, 63, 1_048_577] {
        create_refused(
            &d.server,
            json!({"name": "a", "disk_mib": bad}),
            "disk_mib must be between 64 and 1048576",
        )
        .await;
    }
    let body = create_box(&d.server, json!({"name": "a", "disk_mib": 4096})).await;
    assert_eq!(
        (&body["disk_mib"], &body["disk_source"]),
        (&json!(4096), &json!("box"))
    );
    let (_, body) = d.server.call(Method::POST, "/v1/boxes/a/start", None).await;
    assert_eq!(body["state"], "running", "{body}");
    assert_eq!(d.sandbox.specs.lock().unwrap()[0].1, 4096);
    d.server.shut_down().await;
}

#[tokio::test]
async fn bases_are_refused_on_runtimes_that_cannot_run_them() {
    let mut d = daemon().await;
    create_refused(
        &d.server,
        json!({"name": "a", "runtime": "qemu", "template": "host"}),
        "base host runs on the sandbox only; use --template minimal or debian",
    )
    .await;
    // Image bases run on every runtime, the default (sandbox-like) one too.
    let body = create_box(&d.server, json!({"name": "sb", "template": "minimal"})).await;
    assert_eq!(body["template"], "minimal", "{body}");
    // Without a template, a VM box gets `minimal` (`host` cannot boot).
    let body = create_box(&d.server, json!({"name": "vm", "runtime": "qemu"})).await;
    assert_eq!(body["template"], "minimal");
    d.server.shut_down().await;
}

#[tokio::test]
async fn a_debian_box_without_its_image_fails_its_start_with_the_hint() {
    let mut d = daemon().await;
    create_box(
        &d.server,
        json!({"name": "deb", "runtime": "qemu", "template": "debian"}),
    )
    .await;
    let (status, body) = d
        .server
        .call(Method::POST, "/v1/boxes/deb/start", None)
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("run `berth image build --template debian`"),
        "{message}"
    );
    assert_eq!(d.vm.starts.load(Ordering::SeqCst), 0);
    let (_, body) = d.server.call(Method::GET, "/v1/boxes/deb", None).await;
    assert_eq!(body["state"], "failed", "{body}");
    d.server.shut_down().await;
}

/// A box whose runtime the restarted daemon lacks is `failed` with the reason, never moved.
#[tokio::test]
async fn a_box_whose_runtime_is_gone_fails_at_reconcile() {
    let d = daemon().await;
    dir_template(&d.server, None);
    d.server
        .call(Method::POST, "/v1/templates/reload", None)
        .await;
    create_box(
        &d.server,
        json!({"name": "vm", "runtime": "qemu", "template": "tree"}),
    )
    .await;
    let (_, body) = d
        .server
        .call(Method::POST, "/v1/boxes/vm/start", None)
        .await;
    assert_eq!(body["state"], "running", "{body}");
    let id: berth_protocol::BoxId = body["id"].as_str().unwrap().parse().unwrap();
    // A crash: the daemon goes away without stopping the box.
    let Daemon { server, vm, .. } = d;
    let data = crate::messages::crash(server).await;
    let runtimes = Runtimes::new(
        vec![
            RuntimeEntry::ready(Arc::new(FakeRuntime::new(data.path().to_owned())), None),
            RuntimeEntry::unavailable("qemu", "run `berth image build`"),
        ],
        "fake",
    )
    .unwrap();
    let server = TestServer::start_with(runtimes, None, data).await;
    let (_, body) = server.call(Method::GET, "/v1/boxes/vm", None).await;
    assert_eq!(body["state"], "failed", "{body}");
    assert_eq!(body["runtime"], "qemu");
    let reason = body["state_reason"].as_str().unwrap();
    assert!(reason.contains("run `berth image build`"), "{reason}");
    let (status, body) = server.call(Method::POST, "/v1/boxes/vm/start", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let mut server = server;
    server.shut_down().await;
    // The old fake's agent is ours to end.
    vm.crash(&id);
}

/// `POST /v1/boxes/{ref}/start` with `body`; the answer.
async fn start_with(server: &TestServer, name: &str, body: Value) -> (StatusCode, Value) {
    let path = format!("/v1/boxes/{name}/start");
    server.call(Method::POST, &path, Some(body)).await
}

#[tokio::test]
async fn start_on_another_runtime_is_checked_before_anything_moves() {
    let mut d = daemon().await;
    create_box(&d.server, json!({"name": "plain"})).await;
    for (body, needle) in [
        (json!({"runtime": "nope"}), "unknown runtime"),
        (json!({"runtime": "firecracker"}), "no firecracker binary"),
        (json!({"runtime": "qemu"}), "runs on the sandbox only"),
        (json!({"bogus": 1}), "unknown field"),
    ] {
        let (status, answer) = start_with(&d.server, "plain", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    assert_eq!(
        d.sandbox.starts.load(Ordering::SeqCst),
        0,
        "a refused start started"
    );
    assert_eq!(d.vm.starts.load(Ordering::SeqCst), 0);
    // Its own runtime named: a plain start.
    let (status, answer) = start_with(&d.server, "plain", json!({"runtime": "fake"})).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        (answer["runtime"].as_str(), answer["state"].as_str()),
        (Some("fake"), Some("running"))
    );
    assert_eq!(d.sandbox.starts.load(Ordering::SeqCst), 1);
    d.server.shut_down().await;
}
