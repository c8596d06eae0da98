//! How a VM's boot ends, told apart: a stop, a power-off, a panic, a full host disk, and a
//! guest that cannot boot.

use super::*;

/// Runs `script` as the box's root and does not wait for it: it ends the VM, which cuts
/// the exec stream.
fn run_ending_the_vm(
    client: &berth_runtime::GuestClient,
    script: &'static str,
) -> tokio::task::JoinHandle<(i32, String, String)> {
    let client = client.clone();
    tokio::spawn(async move {
        run(
            &client,
            &["sh", "-c", script],
            BoxUser::Root,
            Some(Duration::from_secs(30)),
        )
        .await
    })
}

/// How a running VM ends is told apart: a `stop` is clean, a guest that powers itself off
/// is clean, a guest kernel panic is a crash quoting the console; `wait_exit` of a box
/// that runs nothing answers at once; nothing is left after any of them.
#[tokio::test(flavor = "multi_thread")]
async fn wait_exit_tells_a_stop_a_power_off_and_a_panic_apart() {
    let Some(fx) = fixture("exits").await else {
        return;
    };
    let rt = &fx.runtime;
    let spec = spec_with_memory(&fx.images, 256);
    // Never started: nothing runs, so it has ended, cleanly.
    assert_eq!(rt.wait_exit(&spec.id).await.unwrap(), BoxExit::Clean);

    rt.start(&spec).await.expect("start");
    let waiter = wait_exit_task(rt, &spec.id);
    rt.stop(&spec.id, GRACE).await.expect("stop");
    let exit = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("wait_exit did not see the stop")
        .unwrap()
        .unwrap();
    assert_eq!(exit, BoxExit::Clean, "a stop");

    // berth-init powers the guest off on SIGTERM, as on a host stop; here nobody on the
    // host asked.
    let spec = common::next_boot(&spec);
    let client = rt.start(&spec).await.expect("start again").client;
    let waiter = wait_exit_task(rt, &spec.id);
    let killer = run_ending_the_vm(&client, "kill -TERM 1");
    let exit = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .unwrap_or_else(|_| panic!("the guest did not power off: {:?}", killer.is_finished()))
        .unwrap()
        .unwrap();
    assert_eq!(exit, BoxExit::Clean, "a power-off from inside");
    rt.stop(&spec.id, GRACE).await.expect("clean up");
    assert_eq!(vm_files_left(rt, &spec.id), Vec::<PathBuf>::new());

    let spec = common::next_boot(&spec);
    let client = rt.start(&spec).await.expect("start a third time").client;
    let waiter = wait_exit_task(rt, &spec.id);
    let crasher = run_ending_the_vm(&client, "echo c > /proc/sysrq-trigger");
    let exit = match tokio::time::timeout(Duration::from_secs(60), waiter).await {
        Ok(exit) => exit.unwrap().unwrap(),
        Err(_) => panic!("the guest did not panic: {:?}", crasher.await),
    };
    let BoxExit::Crashed(reason) = exit else {
        panic!("a panic read as clean")
    };
    eprintln!("panic reason: {reason}");
    assert!(reason.starts_with("the guest kernel panicked"), "{reason}");
    assert!(reason.contains("sysrq"), "the console is missing: {reason}");
    rt.stop(&spec.id, GRACE).await.expect("clean up");
    assert!(rt.list().await.unwrap().is_empty());
    assert_eq!(vm_files_left(rt, &spec.id), Vec::<PathBuf>::new());
}

/// A tmpfs mounted for one test; unmounted on drop (also on panic), after the test's VMs
/// are killed (they hold files on it).
struct TmpfsMount {
    path: PathBuf,
    runtime: Arc<QemuRuntime>,
}

impl TmpfsMount {
    fn new(path: &std::path::Path, size_mib: u64, runtime: &Arc<QemuRuntime>) -> TmpfsMount {
        std::fs::create_dir_all(path).unwrap();
        nix::mount::mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(format!("size={size_mib}m,mode=0700").as_str()),
        )
        .unwrap_or_else(|e| panic!("mount a tmpfs on {}: {e}", path.display()));
        TmpfsMount {
            path: path.to_path_buf(),
            runtime: runtime.clone(),
        }
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let left = self.runtime.kill_all_blocking();
        if !left.is_empty() {
            eprintln!("cleanup could not kill the VMs of: {left:?}");
        }
        if let Err(e) = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH) {
            eprintln!("cannot unmount {}: {e}", self.path.display());
        }
    }
}

/// The host's disk fills up under a running VM (its box dir on a 48 MiB tmpfs, its volume
/// 256 MiB): the VM stops on ENOSPC instead of the guest's ext4 going read-only, and
/// `wait_exit` ends it with a reason that says so; nothing is left running.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_host_disk_ends_the_vm_with_the_reason() {
    let Some(fx) = fixture("diskfull").await else {
        return;
    };
    let rt = &fx.runtime;
    let mut spec = spec_with_memory(&fx.images, 256);
    spec.disk_mib = 256;
    let paths = rt.layout().box_paths(&spec.id);
    let _mount = TmpfsMount::new(paths.box_dir(), 48, rt);
    let client = rt.start(&spec).await.expect("start").client;
    let (qemu, bridge) = (
        rt.qemu_pid(&spec.id).unwrap(),
        rt.bridge_pid(&spec.id).unwrap(),
    );
    let waiter = wait_exit_task(rt, &spec.id);
    let filler = run_ending_the_vm(
        &client,
        "dd if=/dev/zero of=/home/user/fill bs=1M count=200 conv=fsync",
    );
    let exit = match tokio::time::timeout(Duration::from_secs(120), waiter).await {
        Ok(exit) => exit.unwrap().expect("wait_exit"),
        Err(_) => panic!("the full disk went unnoticed; dd: {:?}", filler.await),
    };
    eprintln!("{exit:?}");
    let BoxExit::Crashed(reason) = exit else {
        panic!("a full disk read as a clean end")
    };
    assert!(
        reason.starts_with("the host's disk is full: the box's volume image could not grow ("),
        "{reason}"
    );
    assert!(
        reason.contains(&format!("free on {}", paths.box_dir().display())),
        "{reason}"
    );
    assert!(vm::exited(qemu), "QEMU outlived wait_exit");
    rt.stop(&spec.id, GRACE).await.expect("clean up");
    assert!(vm::exited(bridge), "the channel bridge outlived the stop");
    assert!(rt.list().await.unwrap().is_empty());
    assert_eq!(vm_files_left(rt, &spec.id), Vec::<PathBuf>::new());
}

/// A guest that cannot boot (an initramfs without berth-init: the kernel panics, and
/// `panic=-1` + `-no-reboot` end QEMU) fails `start` fast with the console's tail, and
/// leaves no process or socket.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_that_panics_fails_start_with_its_console_and_leaves_nothing() {
    let Some(fx) = fixture("panic").await else {
        return;
    };
    let empty = fx.dir.path().join("empty.cpio");
    std::fs::write(&empty, b"").unwrap();
    let (rt, _dir) = fixture_with("panic", &fx.images, |c| {
        c.initramfs = empty.clone();
        c.accel = AccelMode::Tcg;
    })
    .await
    .unwrap();
    let spec = spec_with_memory(&fx.images, 128);
    let t0 = Instant::now();
    let err = rt
        .start(&spec)
        .await
        .expect_err("a panicking guest must not start");
    let text = berth_runtime::error_chain(&err);
    eprintln!("expected failure after {:?}: {text}", t0.elapsed());
    assert!(matches!(err, RuntimeError::NotReady { .. }), "{text}");
    assert!(text.contains("QEMU exited"), "{text}");
    assert!(
        text.contains("Kernel panic"),
        "the console tail is missing: {text}"
    );
    // Noticed at once: QEMU's exit ended the wait, not the boot deadline (how long the
    // kernel takes to panic is TCG's and the machine's load's, not berth's).
    assert!(
        !text.contains("boot deadline passed"),
        "the failure was not noticed at once: {text}"
    );
    assert!(rt.list().await.unwrap().is_empty());
    assert_eq!(vm_files_left(&rt, &spec.id), Vec::<PathBuf>::new());
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Stopped);
}
