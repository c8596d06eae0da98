//! The whole backend against a stand-in VMM: a script named as the Firecracker binary
//! (so the real process handling runs: spawn, pid file, find, kill), the fake API on the
//! socket it is given, and a fake berth-init behind the hybrid vsock socket.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_protocol::BoxId;
use serde_json::json;

use super::api::InstanceState;
use super::fake::{FakeApi, FakeGuest};
use super::*;
use crate::{BootToken, BoxSpec, IdMap, Runtime, RuntimeStatus};
use crate::{Limits, RuntimeError};

/// Kills what the test's runtime left running, also on panic.
pub(super) struct Cleanup<'a>(pub(super) &'a FirecrackerRuntime);

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        // No assert: a panic in a drop during a failing test's unwind would abort.
        let left = self.0.kill_all_blocking();
        if !left.is_empty() {
            eprintln!("cleanup could not kill the VMMs of: {left:?}");
        }
    }
}

/// Waits (bounded) until `path` exists.
pub(super) async fn wait_for(path: &Path) {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(1);
    while !path.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no {}",
            path.display()
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(50));
    }
}

pub(super) fn spec(rootfs: &Path) -> BoxSpec {
    BoxSpec {
        id: BoxId::from_random([7; 20]),
        hostname: "fc1".into(),
        rootfs: crate::Rootfs::Image(rootfs.to_path_buf()),
        limits: Limits {
            memory_mib: 256,
            cpus: 2.0,
            ..Limits::default()
        },
        boot_token: BootToken::from_random([0xab; 32]),
        id_map: IdMap::for_slot(0).unwrap(),
        layers: vec![],
        harness: None,
        egress: crate::EgressSetup::default(),
        env: Default::default(),
        memory: None,
        services: Vec::new(),
        disk_mib: 64,
    }
}

/// The backend on `dir`, with a looping shell script as its Firecracker.
pub(super) fn fake_runtime(dir: &Path) -> (FirecrackerRuntime, PathBuf) {
    let data = dir.join("data");
    let fake_bin = dir.join("firecracker");
    std::fs::write(&fake_bin, "#!/bin/sh\nwhile :; do sleep 0.1; done\n").unwrap();
    std::fs::set_permissions(
        &fake_bin,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let rootfs = dir.join("root.ext4");
    std::fs::write(&rootfs, [0u8; 4096]).unwrap();
    let mut config = FirecrackerConfig::new(&data, &dir.join("vmlinux"), &dir.join("initrd.img"));
    config.firecracker_bin = fake_bin;
    // These tests drive the un-jailed mode (`jail_tests.rs` the jailed one).
    config.jailer = None;
    let runtime = VmRuntime {
        vmm: Firecracker {
            layout: VmLayout::new(&data),
            config,
            kvm: "test".into(),
        },
    };
    std::fs::create_dir_all(runtime.layout().boxes_dir()).unwrap();
    (runtime, rootfs)
}

/// Starts `spec` with the fake API and guest standing in; `None` (skip) without mkfs.
pub(super) async fn start_faked(
    runtime: &FirecrackerRuntime,
    spec: &BoxSpec,
) -> Option<(FakeApi, FakeGuest)> {
    let paths = runtime.files(&spec.id);
    let (api_socket, vsock, pid_file) =
        (paths.api_socket(), paths.vsock_socket(), paths.pid_file());
    let console = paths.vm().console_log();
    let stand_ins = tokio::spawn(async move {
        wait_for(&pid_file).await;
        (
            FakeApi::serve_booting(&api_socket, &console),
            FakeGuest::serve_at(&vsock),
        )
    });
    booted_or_skip(runtime.start(spec).await)?;
    Some(stand_ins.await.unwrap())
}

/// What a start (or restore) gave; `None` (the test skips) where the host has no mkfs for
/// the volume; a panic with the cause chain on any other error.
pub(super) fn booted_or_skip<T>(result: Result<T, RuntimeError>) -> Option<T> {
    match result {
        Ok(booted) => Some(booted),
        Err(RuntimeError::Missing { what, .. }) if what.contains("mkfs") => {
            berth_testkit::skip("e2fsprogs", format!("no mkfs for the volume ({what})"));
            None
        }
        Err(e) => panic!("{}", crate::error_chain(&e)),
    }
}

/// The names of a start's phases, in order.
pub(super) fn phase_names(phases: &crate::BootPhases) -> Vec<&str> {
    phases.0.iter().map(|p| p.name.as_str()).collect()
}

/// `wait_exit`: a killed VMM is a crash naming the signal; a guest that powers itself off
/// (Firecracker keeps running: no ACPI) is a clean end, seen on the console; a stop is
/// clean; a box that runs nothing answers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_exit_tells_a_killed_vmm_a_power_off_and_a_stop_apart() {
    let dir = tempfile::tempdir().unwrap();
    let (runtime, rootfs) = fake_runtime(dir.path());
    let _cleanup = Cleanup(&runtime);
    let spec = spec(&rootfs);
    let id = &spec.id;
    assert_eq!(runtime.wait_exit(id).await.unwrap(), crate::BoxExit::Clean);
    let paths = runtime.files(id);
    let Some(_stand_ins) = start_faked(&runtime, &spec).await else {
        return;
    };
    let pid = runtime.firecracker_pid(id).expect("the VMM runs");
    // SAFETY: kill(2) of the fake VMM, our child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let exit = tokio::time::timeout(Duration::from_secs(10), runtime.wait_exit(id))
        .await
        .expect("the kill went unnoticed")
        .unwrap();
    assert_eq!(
        exit,
        crate::BoxExit::Crashed("Firecracker was killed by signal 9 (SIGKILL)".into())
    );
    runtime.stop(id, Duration::from_secs(1)).await.unwrap();

    let again = BoxSpec {
        boot_token: BootToken::from_random([0xcd; 32]),
        ..spec.clone()
    };
    let Some(_stand_ins) = start_faked(&runtime, &again).await else {
        return;
    };
    let waiting = runtime.wait_exit(id);
    std::fs::write(
        paths.vm().console_log(),
        format!(
            "{}[ 9.0] reboot: Power down\n",
            std::fs::read_to_string(paths.vm().console_log()).unwrap_or_default()
        ),
    )
    .unwrap();
    let exit = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the power-off went unnoticed")
        .unwrap();
    assert_eq!(exit, crate::BoxExit::Clean);
    assert!(runtime.firecracker_pid(id).is_some(), "Firecracker runs on");
    runtime.stop(id, Duration::from_secs(1)).await.unwrap();
    assert_eq!(runtime.wait_exit(id).await.unwrap(), crate::BoxExit::Clean);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_pause_resume_stop_and_remove_drive_firecrackers_api() {
    let dir = tempfile::tempdir().unwrap();
    let (runtime, rootfs) = fake_runtime(dir.path());
    let _cleanup = Cleanup(&runtime);
    let spec = spec(&rootfs);
    let paths = runtime.files(&spec.id);

    // The stand-ins come up once the "VMM" has been spawned (its pid file is written
    // after the runtime removed the stale sockets).
    let (api_socket, vsock, pid_file) =
        (paths.api_socket(), paths.vsock_socket(), paths.pid_file());
    let console = paths.vm().console_log();
    let stand_ins = tokio::spawn(async move {
        wait_for(&pid_file).await;
        (
            FakeApi::serve_booting(&api_socket, &console),
            FakeGuest::serve_at(&vsock),
        )
    });
    let booted = match runtime.start(&spec).await {
        Ok(booted) => booted,
        Err(RuntimeError::Missing { what, .. }) if what.contains("mkfs") => {
            berth_testkit::skip("e2fsprogs", format!("no mkfs for the volume ({what})"));
            return;
        }
        Err(e) => panic!("{}", crate::error_chain(&e)),
    };
    let (api, _guest) = stand_ins.await.unwrap();
    api.power_off_to(&paths.vm().console_log());
    assert_eq!(
        phase_names(&booted.phases),
        ["plan", "launch", "guest_ready"],
        "a VM start reports its phases"
    );

    let seen = api.requests();
    let calls: Vec<String> = seen
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        calls,
        [
            "PUT /machine-config",
            "PUT /boot-source",
            "PUT /drives/berth_root",
            "PUT /drives/berth_vol",
            "PUT /drives/berth_config",
            "PUT /vsock",
            "PUT /actions",
        ]
    );
    assert_eq!(
        seen[0].body,
        Some(json!({"vcpu_count": 2, "mem_size_mib": 256, "smt": false}))
    );
    assert_eq!(
        seen[1].body,
        Some(json!({
            "kernel_image_path": runtime.vmm.config.kernel.display().to_string(),
            "initrd_path": runtime.vmm.config.initramfs.display().to_string(),
            "boot_args": BOOT_ARGS,
        }))
    );
    let drive_paths: Vec<PathBuf> = seen[2..5]
        .iter()
        .map(|r| PathBuf::from(r.body.as_ref().unwrap()["path_on_host"].as_str().unwrap()))
        .collect();
    assert_eq!(
        drive_paths,
        [
            rootfs.clone(),
            paths.vm().volume(),
            paths.vm().config_disk()
        ]
    );
    // The config disk lists the disks in the drives' order, for berth-init's positional
    // mapping.
    let config = crate::vm::config_disk::read(&paths.vm().config_disk()).unwrap();
    assert_eq!(config.disks, berth_protocol::vm::VmDisk::base_disks());
    assert_eq!(config.token, spec.boot_token.as_str());
    assert_eq!(
        seen[5].body,
        Some(json!({"guest_cid": 3, "uds_path": paths.vsock_socket().display().to_string()}))
    );
    assert_eq!(api.state(), InstanceState::Running);

    // Egress: a guest connection to host port 2025 arrives on the listener start bound.
    let _guest_side = tokio::net::UnixStream::connect(paths.egress_socket())
        .await
        .unwrap();
    booted.egress.accept().await.unwrap();

    let id = &spec.id;
    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Running);
    assert_eq!(runtime.list().await.unwrap(), vec![id.clone()]);
    runtime.pause(id).await.unwrap();
    assert_eq!(api.state(), InstanceState::Paused);
    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Paused);
    assert!(matches!(
        runtime.pause(id).await,
        Err(RuntimeError::WrongState {
            actual: "paused",
            ..
        })
    ));
    runtime.resume(id).await.unwrap();
    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Running);
    assert!(matches!(
        runtime.start(&spec).await,
        Err(RuntimeError::WrongState { .. })
    ));

    let pid = runtime.firecracker_pid(id).expect("the VMM runs");
    runtime.pause(id).await.unwrap();
    let started = Instant::now();
    runtime.stop(id, Duration::from_secs(30)).await.unwrap();
    // The power-off line ended the wait, not the grace.
    assert!(started.elapsed() < Duration::from_secs(10));
    let actions: Vec<serde_json::Value> = api
        .requests()
        .iter()
        .filter(|r| r.path == "/actions" || r.path == "/vm")
        .filter_map(|r| r.body.clone())
        .collect();
    assert!(actions.ends_with(&[
        json!({"state": "Resumed"}),
        json!({"action_type": "SendCtrlAltDel"})
    ]));
    assert!(!crate::process::pid_alive(pid));
    for file in paths.boot_files() {
        assert!(!file.exists(), "{} left", file.display());
    }
    assert!(paths.vm().volume().exists(), "the volume stays");
    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Stopped);
    assert!(runtime.list().await.unwrap().is_empty());
    assert!(matches!(
        runtime.resume(id).await,
        Err(RuntimeError::WrongState {
            actual: "stopped",
            ..
        })
    ));
    runtime.stop(id, Duration::from_secs(1)).await.unwrap();
    runtime.remove(id).await.unwrap();
    assert!(!paths.vm().box_dir().exists());
}

#[tokio::test]
async fn new_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = FirecrackerConfig::new(
        dir.path(),
        &dir.path().join("vmlinuz"),
        &dir.path().join("initrd.img"),
    );
    config.firecracker_bin = dir.path().join("no-firecracker");
    let err = FirecrackerRuntime::new(config.clone()).await.unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Missing { what, .. } if what.starts_with("Firecracker")),
        "{err}"
    );
    // Jailed by default: without a jailer it does not run, and says how to run without one
    // (knowingly, as host root).
    config.firecracker_bin = "/bin/true".into();
    config
        .jailer
        .as_mut()
        .expect("jailed by default")
        .jailer_bin = dir.path().join("no-jailer");
    match FirecrackerRuntime::new(config.clone()).await.unwrap_err() {
        RuntimeError::Missing { what, hint } => {
            assert!(what.contains("jailer"), "{what}");
            assert!(hint.contains("--firecracker-unjailed"), "{hint}");
        }
        other => panic!("{other}"),
    }
    config.jailer = None;
    // A bzImage where a vmlinux is needed: the error says how to get one.
    std::fs::write(&config.kernel, b"MZ\xea\x07 a bzImage").unwrap();
    std::fs::write(&config.initramfs, b"initramfs").unwrap();
    match FirecrackerRuntime::new(config).await.unwrap_err() {
        RuntimeError::Missing { what, hint } => {
            assert!(what.contains("vmlinux"), "{what}");
            assert!(hint.contains("berth image build"), "{hint}");
            assert!(!hint.contains("extract-vmlinux"), "{hint}");
        }
        other => panic!("{other}"),
    }
}

#[test]
fn only_an_unjailed_backend_carries_the_loud_notice() {
    let dir = tempfile::tempdir().unwrap();
    let (mut runtime, _) = fake_runtime(dir.path());
    let described = runtime.describe();
    assert!(!described.jailer);
    assert_eq!(described.notice.as_deref(), Some(UNJAILED_NOTICE));
    runtime.vmm.config.jailer = Some(JailerConfig::new(dir.path()));
    let described = runtime.describe();
    assert!(described.jailer && described.notice.is_none());
}
