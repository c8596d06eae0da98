//! Snapshot and restore of the whole backend against the fake VMM (`fake.rs`), which
//! checks what the real Firecracker would: create only when paused, load only on a fresh
//! VMM, every drive reopened, the vsock socket free to bind.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::api::InstanceState;
use super::fake::{FakeApi, FakeGuest, GuestToken};
use super::runtime_tests::{booted_or_skip, fake_runtime, phase_names, spec, wait_for, Cleanup};
use super::*;
use crate::{BootToken, BoxSpec, Runtime, RuntimeStatus};
use crate::{GuestError, RuntimeError};

/// Serves the fake API (and, for a cold boot, the guest) once the "VMM" is spawned; with
/// `on_load`, a snapshot it loads brings back a guest holding that token.
fn stand_ins(
    paths: &FcPaths,
    guest: Option<GuestToken>,
    on_load: Option<GuestToken>,
) -> tokio::task::JoinHandle<(FakeApi, Option<FakeGuest>)> {
    let (api_socket, vsock, pid_file) =
        (paths.api_socket(), paths.vsock_socket(), paths.pid_file());
    let console = paths.vm().console_log();
    tokio::spawn(async move {
        wait_for(&pid_file).await;
        let api = FakeApi::serve_booting_with(&api_socket, &console, |api| {
            if let Some(token) = on_load {
                api.guest_on_load(token);
            }
        });
        let guest = guest.map(|token| FakeGuest::with_token(&vsock, token));
        (api, guest)
    })
}

fn calls(api: &FakeApi) -> Vec<String> {
    api.requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_ends_the_vmm_and_a_restore_loads_it_and_hands_over_a_new_token() {
    let dir = tempfile::tempdir().unwrap();
    let (runtime, rootfs) = fake_runtime(dir.path());
    let _cleanup = Cleanup(&runtime);
    let spec = spec(&rootfs);
    let (id, paths) = (&spec.id, runtime.files(&spec.id));
    assert!(runtime.capabilities().snapshot);

    // Nothing to restore, nothing to snapshot yet.
    assert!(matches!(
        runtime.restore(&spec, &spec.boot_token).await,
        Err(RuntimeError::WrongState {
            expected: "snapshotted",
            ..
        })
    ));
    assert!(matches!(
        runtime.snapshot(id).await,
        Err(RuntimeError::WrongState {
            actual: "stopped",
            ..
        })
    ));

    // The guest's token lives in its memory: the cell outlives the "VMM".
    let token: GuestToken = Arc::new(Mutex::new(Some(spec.boot_token.as_str().to_owned())));
    let booting = stand_ins(&paths, Some(token.clone()), None);
    if booted_or_skip(runtime.start(&spec).await).is_none() {
        return;
    }
    let (api, guest) = booting.await.unwrap();
    let pid = runtime.firecracker_pid(id).expect("the VMM runs");
    assert!(runtime.memory_held(id).await.unwrap().unwrap() > 0);

    // A refused create leaves the box running as it was.
    api.fail(
        "/snapshot/create",
        400,
        r#"{"fault_message": "No space left"}"#,
    );
    let err = runtime.snapshot(id).await.unwrap_err();
    assert!(err.to_string().contains("No space left"), "{err}");
    assert_eq!(api.state(), InstanceState::Running);
    assert_eq!(runtime.snapshot_size(id).await.unwrap(), None);
    api.heal("/snapshot/create");

    let t0 = std::time::Instant::now();
    runtime.snapshot(id).await.unwrap();
    eprintln!("snapshot (fake VMM): {:?}", t0.elapsed());
    let tail: Vec<String> = calls(&api).into_iter().rev().take(2).collect();
    assert_eq!(tail, ["PUT /snapshot/create", "PATCH /vm"]);
    let create = api.requests().last().unwrap().body.clone().unwrap();
    assert_eq!(
        create,
        json!({
            "snapshot_path": paths.sockets_dir().join("snapshot.state").display().to_string(),
            "mem_file_path": paths.sockets_dir().join("snapshot.memory").display().to_string(),
            "snapshot_type": "Full",
        })
    );
    assert!(!crate::process::pid_alive(pid), "the VMM is gone");
    assert_eq!(runtime.firecracker_pid(id), None);
    assert_eq!(runtime.memory_held(id).await.unwrap(), None);
    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Stopped);
    assert_eq!(runtime.wait_exit(id).await.unwrap(), crate::BoxExit::Clean);
    let kept = paths.vm().box_dir().join("snapshot");
    assert_eq!(
        std::fs::metadata(kept.join("memory")).unwrap().len(),
        256 << 20
    );
    let size = runtime
        .snapshot_size(id)
        .await
        .unwrap()
        .expect("a snapshot");
    assert!(size > 0 && size < 256 << 20, "sparse memory: {size} bytes");
    for file in paths.boot_files() {
        assert!(!file.exists(), "{} left", file.display());
    }
    drop((api, guest));

    // Restore: a fresh VMM loads the snapshot (nothing else configured), the guest comes
    // back on its vsock socket with the old token, which hands over the new one.
    let again = BoxSpec {
        boot_token: BootToken::from_random([0xcd; 32]),
        ..spec.clone()
    };
    let restoring = stand_ins(&paths, None, Some(token.clone()));
    let t0 = std::time::Instant::now();
    let booted = runtime.restore(&again, &spec.boot_token).await;
    eprintln!("restore (fake VMM): {:?}", t0.elapsed());
    let (api, _) = restoring.await.unwrap();
    let booted = booted.unwrap_or_else(|e| panic!("{}", crate::error_chain(&e)));
    assert_eq!(calls(&api), ["PUT /snapshot/load"]);
    assert_eq!(phase_names(&booted.phases), ["plan", "load", "hand_over"]);
    assert_eq!(
        api.requests()[0].body,
        Some(json!({
            "snapshot_path": paths.sockets_dir().join("snapshot.state").display().to_string(),
            "mem_backend": {
                "backend_path": paths.sockets_dir().join("snapshot.memory").display().to_string(),
                "backend_type": "File",
            },
            "enable_diff_snapshots": false,
            "resume_vm": true,
        }))
    );
    assert_eq!(api.state(), InstanceState::Running);
    assert_eq!(
        token.lock().unwrap().as_deref(),
        Some(again.boot_token.as_str())
    );
    booted
        .client
        .info()
        .await
        .expect("the new token opens the channel");
    match runtime.channel(id, &spec.boot_token).info().await {
        Err(GuestError::Remote { status: 401, .. }) => {}
        other => panic!("the old token must be refused, got {other:?}"),
    }
    // Egress is bound for the new boot.
    let _guest_side = tokio::net::UnixStream::connect(paths.egress_socket())
        .await
        .unwrap();
    booted.egress.accept().await.unwrap();
    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Running);
    assert!(runtime.memory_held(id).await.unwrap().is_some());
    // Restored: the snapshot is gone, and so are Firecracker's links to it.
    assert_eq!(runtime.snapshot_size(id).await.unwrap(), None);
    assert!(!kept.exists());
    assert!(!paths.sockets_dir().join("snapshot.memory").exists());
    runtime.stop(id, Duration::from_secs(1)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_load_keeps_the_snapshot_and_discard_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    let (runtime, rootfs) = fake_runtime(dir.path());
    let _cleanup = Cleanup(&runtime);
    let spec = spec(&rootfs);
    let (id, paths) = (&spec.id, runtime.files(&spec.id));
    let kept = paths.vm().box_dir().join("snapshot");
    crate::vm::make_private_dir(paths.vm().box_dir()).unwrap();
    crate::vm::make_private_dir(&kept).unwrap();
    // A state whose memory file is missing its 256 MiB.
    std::fs::write(
        kept.join("state"),
        json!({"/machine-config": {"mem_size_mib": 256}}).to_string(),
    )
    .unwrap();
    std::fs::write(kept.join("memory"), "").unwrap();
    assert!(runtime.snapshot_size(id).await.unwrap().is_some());

    let restoring = stand_ins(&paths, None, None);
    let Err(err) = runtime.restore(&spec, &spec.boot_token).await else {
        panic!("a snapshot of nothing must not load");
    };
    if matches!(&err, RuntimeError::Missing { .. }) {
        // No mkfs for the volume: skipped, said so.
        let _ = booted_or_skip::<()>(Err(err));
        return;
    }
    let (api, _) = restoring.await.unwrap();
    assert!(
        crate::error_chain(&err).contains("memory file"),
        "{}",
        crate::error_chain(&err)
    );
    assert_eq!(api.state(), InstanceState::NotStarted);
    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Stopped);
    assert!(
        kept.join("state").exists(),
        "the snapshot stays for another try"
    );
    runtime.discard_snapshot(id).await.unwrap();
    assert_eq!(runtime.snapshot_size(id).await.unwrap(), None);
    runtime.discard_snapshot(id).await.unwrap();

    // A cold boot changes the volume under a snapshot: it goes first.
    crate::vm::make_private_dir(&kept).unwrap();
    std::fs::write(kept.join("state"), "{}").unwrap();
    std::fs::write(kept.join("memory"), "").unwrap();
    drop(api);
    let booting = stand_ins(&paths, Some(Arc::new(Mutex::new(None))), None);
    runtime.start(&spec).await.unwrap();
    let _stand_ins = booting.await.unwrap();
    assert!(!kept.exists());
    runtime.stop(id, Duration::from_secs(1)).await.unwrap();
}
