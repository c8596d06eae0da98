//! The qemu backend booting real microVMs: the Debian cloud kernel and an initramfs with
//! berth-init from `berth-image`, the `minimal` (busybox) rootfs, QEMU (TCG unless a KVM
//! guest runs here) and berth-init on the host as the channel bridge.
//!
//! Images are built once into `$BERTH_TEST_IMAGE_DIR` (default
//! `/var/tmp/berth-test-images`; content-addressed, so later runs reuse them: see
//! `common::images`). Needs
//! `qemu-system-x86_64` (scripts/install-deps.sh --tests installs it), a static berth-init
//! (`make init`, or `$BERTH_INIT_BIN`), and the Debian mirror
//! for the first image build; otherwise each test skips (`berth_testkit::skip`, part `qemu`)
//! and returns.
//!
//! The conformance suite (tests/conformance.rs) runs every backend-generic check on qemu
//! too (`qemu::<check>`); this file holds what only a VM does: its own kernel, QMP, a
//! killed QEMU, a panicking guest, the boot deadline, a restarted backend.

#[allow(dead_code, unused_imports)]
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_protocol::guest::BoxUser;
use berth_runtime::qemu::{AccelMode, QemuConfig, QemuRuntime};
use berth_runtime::{BoxExit, Runtime, RuntimeError, RuntimeStatus};
use common::images::{images, vm_binaries, Images};
use common::vm::{self, spec_with_memory};
use common::{run, run_ok};

const GRACE: Duration = Duration::from_secs(10);

/// One qemu backend on a fresh data dir; dropping it kills every VM it started.
type Fixture = vm::VmFixture<QemuRuntime>;

async fn fixture(name: &str) -> Option<Fixture> {
    if let Err(why) = vm_binaries() {
        berth_testkit::skip("qemu", why);
        return None;
    }
    let images = match tokio::task::spawn_blocking(images).await.unwrap() {
        Ok(images) => images,
        Err(why) => {
            berth_testkit::skip("qemu", why);
            return None;
        }
    };
    let slot = vm::vm_slot().await;
    fixture_with(name, &images, |_| {}).await.map(|runtime| {
        let (runtime, dir) = runtime;
        Fixture {
            runtime,
            images,
            dir,
            _slot: slot,
        }
    })
}

/// The backend config of the tests on `data_dir`: the test images, a small volume.
fn test_config(data_dir: &std::path::Path, images: &Images) -> QemuConfig {
    QemuConfig::new(data_dir, &images.kernel, &images.initramfs)
}

async fn fixture_with(
    name: &str,
    images: &Images,
    tweak: impl FnOnce(&mut QemuConfig),
) -> Option<(Arc<QemuRuntime>, tempfile::TempDir)> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("berth-qemu-{name}-"))
        .tempdir()
        .unwrap();
    let mut config = test_config(dir.path(), images);
    tweak(&mut config);
    match QemuRuntime::new(config).await {
        Ok(runtime) => {
            eprintln!("qemu backend: {:?}", runtime.describe().accel);
            Some((Arc::new(runtime), dir))
        }
        Err(e @ RuntimeError::Missing { .. }) => {
            berth_testkit::skip("qemu", e);
            None
        }
        Err(e) => panic!("QemuRuntime::new: {e}"),
    }
}

fn vm_files_left(runtime: &QemuRuntime, id: &berth_protocol::BoxId) -> Vec<PathBuf> {
    vm::qemu_boot_files_left(&runtime.layout().box_paths(id))
}

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
    let client = rt.start(&spec).await.expect("start").client;
    eprintln!("cold boot to ready ({:?}): {:?}", rt.accel(), t0.elapsed());
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

/// `wait_exit` of the box, in a task of its own.
fn wait_exit_task(
    rt: &Arc<QemuRuntime>,
    id: &berth_protocol::BoxId,
) -> tokio::task::JoinHandle<Result<BoxExit, RuntimeError>> {
    let (rt, id) = (rt.clone(), id.clone());
    tokio::spawn(async move { rt.wait_exit(&id).await })
}

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
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "the failure was not noticed at once"
    );
    assert!(rt.list().await.unwrap().is_empty());
    assert_eq!(vm_files_left(&rt, &spec.id), Vec::<PathBuf>::new());
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Stopped);
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

/// QEMU itself says a running qemu box can be migrated (a snapshot is a migration to a
/// file): no device of its setup blocks it. The guest channel was once vhost-user-vsock,
/// which every QEMU refuses to migrate; this fails if a device like it comes back.
#[tokio::test(flavor = "multi_thread")]
async fn qemu_finds_nothing_that_blocks_a_migration() {
    let Some(fx) = fixture("migratable").await else {
        return;
    };
    let rt = &fx.runtime;
    let spec = spec_with_memory(&fx.images, 256);
    rt.start(&spec).await.expect("start");
    let paths = rt.layout().box_paths(&spec.id);
    let mut qmp = berth_runtime::qemu::Qmp::connect(&paths.qmp_socket())
        .await
        .expect("QMP");
    let migrate = qmp.execute("query-migrate").await.expect("query-migrate");
    drop(qmp);
    let blocked = migrate.get("blocked-reasons");
    assert!(
        blocked.is_none_or(|b| b.as_array().is_some_and(|a| a.is_empty())),
        "QEMU would refuse to snapshot: {migrate}"
    );
    assert!(rt.capabilities().snapshot);
    rt.stop(&spec.id, GRACE).await.unwrap();
}

/// A snapshot loads only into the launch it was saved from: a box whose memory changed
/// since is refused with the difference (the daemon then boots it cold), the snapshot is
/// kept until that cold start drops it, and nothing of the refused restore runs on.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_of_another_launch_is_refused_and_a_cold_start_drops_it() {
    let Some(fx) = fixture("snapmismatch").await else {
        return;
    };
    let rt = &fx.runtime;
    let spec = spec_with_memory(&fx.images, 256);
    rt.start(&spec).await.expect("start");
    rt.snapshot(&spec.id).await.expect("snapshot");
    let paths = rt.layout().box_paths(&spec.id);
    let state = paths.box_dir().join("snapshot/state");
    let meta = std::fs::metadata(&state).expect("the snapshot's state file");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        0,
        "the snapshot is root's, not the VMM's"
    );
    assert!(!paths.migration_socket().exists());

    let mut bigger = common::next_boot(&spec);
    bigger.limits.memory_mib = 384;
    match rt.restore(&bigger, &spec.boot_token).await {
        Err(e @ RuntimeError::SnapshotMismatch { .. }) => {
            let text = e.to_string();
            assert!(text.contains("384M") && text.contains("256M"), "{text}");
        }
        other => panic!("a snapshot of 256 MiB must not load into 384 MiB: {other:?}"),
    }
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Stopped);
    assert!(rt.snapshot_size(&spec.id).await.unwrap().is_some());
    let client = rt.start(&bigger).await.expect("cold start").client;
    assert_eq!(rt.snapshot_size(&spec.id).await.unwrap(), None);
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    rt.stop(&spec.id, GRACE).await.unwrap();
}
