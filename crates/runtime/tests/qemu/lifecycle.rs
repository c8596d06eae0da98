//! A VM's life: its own kernel and a cold boot keeping the volume, QEMU killed from
//! outside, pause and resume, a restarted backend, the boot deadline, what is missing, and
//! egress over vsock.

use super::*;

/// The check: a VM boots its own kernel, runs `uname -r`, keeps a file written in
/// it across a stop and a cold boot; stop leaves no process or socket; remove leaves nothing.
#[tokio::test(flavor = "multi_thread")]
async fn boots_its_own_kernel_and_keeps_files_across_a_cold_boot() {
    let Some(fx) = fixture("persist").await else {
        return;
    };
    let rt = &fx.runtime;
    let spec = spec_with_memory(&fx.images, 256);
    let t0 = Instant::now();
    let booted = rt.start(&spec).await.expect("start");
    eprintln!("cold boot to ready ({:?}): {:?}", rt.accel(), t0.elapsed());
    eprintln!("boot phases: {:?}", booted.phases);
    let names: Vec<&str> = booted.phases.0.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["plan", "launch", "guest_ready"]);
    let client = booted.client;
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Running);
    assert!(rt.list().await.unwrap().contains(&spec.id));
    let (qemu, bridge) = (
        rt.qemu_pid(&spec.id).unwrap(),
        rt.bridge_pid(&spec.id).unwrap(),
    );

    vm::assert_berth_guest(&client, &fx.images.kernel_version).await;
    let cmdline = run_ok(&client, &["cat", "/proc/cmdline"], BoxUser::User).await;
    assert!(cmdline.contains("rdinit=/berth-init"), "{cmdline}");
    assert!(
        !cmdline.contains(spec.boot_token.as_str()),
        "the token is on the command line"
    );

    let file = vm::write_kept_file(&client).await;
    let t1 = Instant::now();
    rt.stop(&spec.id, GRACE).await.expect("stop");
    eprintln!("stop: {:?}", t1.elapsed());
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Stopped);
    for pid in [qemu, bridge] {
        assert!(vm::exited(pid), "pid {pid} outlived stop");
    }
    assert_eq!(vm_files_left(rt, &spec.id), Vec::<PathBuf>::new());
    assert!(!rt.list().await.unwrap().contains(&spec.id));

    let again = common::next_boot(&spec);
    let t2 = Instant::now();
    let client = rt.start(&again).await.expect("cold boot again").client;
    eprintln!("second boot to ready: {:?}", t2.elapsed());
    vm::assert_kept_file(&client, &file).await;
    common::assert_old_token_refused(rt.as_ref(), &spec).await;
    assert!(matches!(
        rt.start(&again).await,
        Err(RuntimeError::WrongState { .. })
    ));
    rt.remove(&spec.id).await.expect("remove");
    assert!(!rt.layout().box_paths(&spec.id).box_dir().exists());
    assert!(rt.list().await.unwrap().is_empty());
}

/// QEMU killed from outside: the box reads as stopped, its channel bridge is gone with
/// it, nothing is left, and it boots again.
#[tokio::test(flavor = "multi_thread")]
async fn qemu_killed_with_sigkill_reads_as_stopped_and_leaves_nothing() {
    let Some(fx) = fixture("sigkill").await else {
        return;
    };
    let rt = &fx.runtime;
    let spec = spec_with_memory(&fx.images, 256);
    rt.start(&spec).await.expect("start");
    let (qemu, bridge) = (
        rt.qemu_pid(&spec.id).unwrap(),
        rt.bridge_pid(&spec.id).unwrap(),
    );
    let waiter = wait_exit_task(rt, &spec.id);
    // SAFETY: plain kill(2) of the VM's QEMU, a child of this process.
    assert_eq!(unsafe { libc::kill(qemu, libc::SIGKILL) }, 0);
    let t0 = Instant::now();
    let exit = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("wait_exit did not notice the kill")
        .unwrap()
        .expect("wait_exit");
    eprintln!("noticed after {:?}: {exit:?}", t0.elapsed());
    assert_eq!(
        exit,
        BoxExit::Crashed("QEMU was killed by signal 9 (SIGKILL)".into())
    );
    // Asked again (a late caller), it says the same.
    assert_eq!(rt.wait_exit(&spec.id).await.unwrap(), exit);
    common::wait_until(|| async { rt.status(&spec.id).await.unwrap() == RuntimeStatus::Stopped })
        .await;
    common::wait_until(|| async { rt.bridge_pid(&spec.id).is_none() }).await;
    assert!(rt.list().await.unwrap().is_empty());
    assert_eq!(vm_files_left(rt, &spec.id), Vec::<PathBuf>::new());
    let _ = bridge;
    let again = common::next_boot(&spec);
    let client = rt.start(&again).await.expect("start after a kill").client;
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    rt.stop(&spec.id, GRACE).await.expect("stop");
}

/// QMP stop/cont: a paused VM answers nothing until resumed; a paused VM stops.
#[tokio::test(flavor = "multi_thread")]
async fn pause_freezes_the_vm_until_resume() {
    let Some(fx) = fixture("pause").await else {
        return;
    };
    let rt = &fx.runtime;
    let spec = spec_with_memory(&fx.images, 256);
    let client = rt.start(&spec).await.expect("start").client;
    assert!(matches!(
        rt.resume(&spec.id).await,
        Err(RuntimeError::WrongState { .. })
    ));
    rt.pause(&spec.id).await.expect("pause");
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Paused);
    assert!(matches!(
        rt.pause(&spec.id).await,
        Err(RuntimeError::WrongState { .. })
    ));
    let frozen = tokio::time::timeout(
        Duration::from_millis(1500),
        run(&client, &["echo", "ok"], BoxUser::User, None),
    )
    .await;
    assert!(frozen.is_err(), "a paused VM answered");
    rt.resume(&spec.id).await.expect("resume");
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Running);
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    rt.pause(&spec.id).await.unwrap();
    rt.stop(&spec.id, GRACE).await.expect("stop a paused VM");
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Stopped);
    assert!(rt.list().await.unwrap().is_empty());
}

/// A new backend on the same data dir (a restarted daemon) finds a VM the old one left
/// running, reports it running, reaches it with the boot's token through the bridge the
/// old one started, boots another beside it, and stops both.
#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_backend_finds_and_stops_a_running_vm() {
    let Some(fx) = fixture("reattach").await else {
        return;
    };
    let spec = spec_with_memory(&fx.images, 256);
    fx.runtime.start(&spec).await.expect("start");

    let mut config = test_config(fx.runtime.layout().data_dir(), &fx.images);
    config.accel = AccelMode::Tcg;
    let again = QemuRuntime::new(config).await.expect("a second backend");
    assert_eq!(again.list().await.unwrap(), vec![spec.id.clone()]);
    assert_eq!(
        again.status(&spec.id).await.unwrap(),
        RuntimeStatus::Running
    );
    let client = again.channel(&spec.id, &spec.boot_token);
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    let other = spec_with_memory(&fx.images, 128);
    again.start(&other).await.expect("start another");
    for id in [&spec.id, &other.id] {
        again.stop(id, GRACE).await.expect("stop");
    }
    assert!(again.list().await.unwrap().is_empty());
    assert!(fx.runtime.list().await.unwrap().is_empty());
}

/// A guest that is not ready by the boot deadline is killed, and the error says so with
/// the console's tail.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_past_its_boot_deadline_is_killed_with_the_reason() {
    let Some(fx) = fixture("deadline").await else {
        return;
    };
    let (rt, _dir) = fixture_with("deadline", &fx.images, |c| {
        c.boot_deadline = Some(Duration::from_millis(300));
        c.accel = AccelMode::Tcg;
    })
    .await
    .unwrap();
    let spec = spec_with_memory(&fx.images, 128);
    let err = rt
        .start(&spec)
        .await
        .expect_err("no guest boots in 300 ms under TCG");
    let text = berth_runtime::error_chain(&err);
    assert!(matches!(err, RuntimeError::NotReady { .. }), "{text}");
    assert!(text.contains("300 ms boot deadline passed"), "{text}");
    assert!(text.contains("console log"), "{text}");
    assert!(rt.list().await.unwrap().is_empty());
    assert_eq!(rt.qemu_pid(&spec.id), None);
    assert_eq!(vm_files_left(&rt, &spec.id), Vec::<PathBuf>::new());
}

/// Without its binaries or images the backend says what is missing.
#[tokio::test]
async fn new_names_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = QemuConfig::new(
        dir.path(),
        &dir.path().join("no-kernel"),
        &dir.path().join("no-initramfs"),
    );
    config.qemu_bin = dir.path().join("no-qemu");
    match QemuRuntime::new(config.clone()).await {
        Err(RuntimeError::Missing { what, hint }) => {
            assert!(
                what.contains("QEMU") && hint.contains("qemu-system-x86"),
                "{what}: {hint}"
            )
        }
        other => panic!("{other:?}"),
    }
    config.qemu_bin = PathBuf::from("/bin/true");
    config.bridge_bin = PathBuf::from("/bin/true");
    match QemuRuntime::new(config).await {
        Err(RuntimeError::Missing { what, hint }) => {
            assert!(
                what.contains("kernel") && hint.contains("berth image build"),
                "{what}"
            )
        }
        other => panic!("{other:?}"),
    }
}

/// Egress from a VM: a connection to 127.0.0.1:443 in the guest arrives on the listener
/// `start` returned (over vsock port 2025), bytes unchanged both ways; `/etc/hosts` pins
/// the allowed name and the box's env reaches its processes; a rebound listener gets the
/// next connection.
#[tokio::test(flavor = "multi_thread")]
async fn egress_reaches_the_listener_over_vsock_and_rebinds() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Some(fx) = fixture("egress").await else {
        return;
    };
    let rt = &fx.runtime;
    let mut spec = spec_with_memory(&fx.images, 256);
    spec.egress.pinned_hosts = vec!["api.example.test".into()];
    spec.env = [("ANTHROPIC_API_KEY".to_owned(), "berth-ph-vm".to_owned())].into();
    let booted = rt.start(&spec).await.expect("start");
    let (client, egress) = (booted.client, booted.egress);
    let hosts = run_ok(&client, &["cat", "/etc/hosts"], BoxUser::User).await;
    assert!(hosts.contains("127.0.0.1\tapi.example.test"), "{hosts}");
    let env = run_ok(&client, &["env"], BoxUser::User).await;
    assert!(env.contains("ANTHROPIC_API_KEY=berth-ph-vm\n"), "{env}");

    let mut listener = egress;
    for round in ["first", "after rebind"] {
        let box_side = {
            let client = client.clone();
            tokio::spawn(async move {
                run(
                    &client,
                    &["sh", "-c", "echo ping | nc 127.0.0.1 443"],
                    BoxUser::User,
                    Some(Duration::from_secs(30)),
                )
                .await
            })
        };
        let (mut stream, _) = tokio::time::timeout(Duration::from_secs(30), listener.accept())
            .await
            .unwrap_or_else(|_| panic!("{round}: no stream reached the egress listener"))
            .expect("accept");
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\n") {
            assert_eq!(
                stream.read(&mut byte).await.unwrap(),
                1,
                "{round}: {line:?}"
            );
            line.push(byte[0]);
        }
        assert_eq!(line, b"ping\n", "{round}");
        stream.write_all(b"pong\n").await.unwrap();
        drop(stream);
        let (code, out, err) = tokio::time::timeout(Duration::from_secs(60), box_side)
            .await
            .expect("the box side ended")
            .unwrap();
        assert_eq!((code, out.trim()), (0, "pong"), "{round}: {err}");
        drop(listener);
        listener = rt
            .rebind_egress(&spec.id, spec.id_map)
            .await
            .expect("rebind");
    }
    rt.stop(&spec.id, GRACE).await.expect("stop");
}
