//! A volume a VM's guest has written is untrusted input to the host (issue 11, part 1).
//! Guest root can write any byte of its volume disk; the same box can then start on the
//! sandbox runtime, which mounts that image in the host kernel. These tests craft images
//! the way a guest root could (debugfs and byte writes on a stopped box's image, plus the
//! marker a VM start leaves) and start the box on a real runc sandbox:
//! - damage under a "clean" superblock, or a directory loop: the start fails with the
//!   reason and the image is byte for byte as it was, never mounted;
//! - `errors=panic` in the superblock: mounted with `errors=remount-ro,nosuid,nodev`
//!   (read from /proc/self/mountinfo);
//! - a real qemu boot leaves the marker; the sandbox checks that volume in full, then
//!   forgets the marker.
//!
//! Needs root and runc (and qemu with the test images for the last); otherwise each test
//! skips (`berth_testkit::skip`, parts `sandbox`, `e2fsprogs`, `berth-init`, `qemu`).

#[allow(dead_code, unused_imports)]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_runtime::qemu::{QemuConfig, QemuRuntime};
use berth_runtime::sandbox::{SandboxConfig, SandboxRuntime};
use berth_runtime::{BoxSpec, Limits, Rootfs, Runtime};
use common::run_ok;

const GRACE: Duration = Duration::from_secs(10);

/// A sandbox runtime on its own data dir; dropping it (also on panic) removes every box
/// it started and releases their volume mounts.
struct Sandbox {
    runtime: Arc<SandboxRuntime>,
    dir: tempfile::TempDir,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let left = self.runtime.cleanup_all_blocking();
        if !left.is_empty() {
            eprintln!("cleanup could not remove: {left:?}");
        }
    }
}

impl Sandbox {
    fn new(name: &str) -> Option<Sandbox> {
        let skip = |part: &str, why: &dyn std::fmt::Display| {
            berth_testkit::skip(part, format!("{name}: {why}"));
            None
        };
        if !nix::unistd::geteuid().is_root() {
            return skip("sandbox", &"the sandbox backend needs root");
        }
        if Command::new("debugfs").arg("-V").output().is_err() {
            return skip("e2fsprogs", &"debugfs is not installed");
        }
        let init_bin = match berth_runtime::init_binary() {
            Ok(path) => path,
            Err(e) => return skip("berth-init", &e),
        };
        let dir = tempfile::Builder::new()
            .prefix("berth-uv-")
            .tempdir()
            .unwrap();
        match SandboxRuntime::new(SandboxConfig {
            data_dir: dir.path().to_path_buf(),
            oci_runtime: std::env::var("BERTH_OCI_RUNTIME").unwrap_or_else(|_| "runc".into()),
            init_bin,
        }) {
            Ok(runtime) => Some(Sandbox {
                runtime: Arc::new(runtime),
                dir,
            }),
            Err(e @ berth_runtime::RuntimeError::Missing { .. }) => skip("sandbox", &e),
            Err(e) => panic!("SandboxRuntime::new: {e}"),
        }
    }

    fn image(&self, spec: &BoxSpec) -> PathBuf {
        berth_runtime::volume_image(self.dir.path(), &spec.id)
    }

    /// A box that has run once on the sandbox (its volume made, a file in its home) and
    /// is stopped.
    async fn stopped_box(&self) -> BoxSpec {
        let mut spec = common::new_spec(Limits::default());
        spec.disk_mib = 64;
        let client = self.runtime.start(&spec).await.expect("first start").client;
        run_ok(
            &client,
            &[
                "sh",
                "-c",
                "mkdir -p /home/user/a/b && echo hi > /home/user/a/f",
            ],
            BoxUser::User,
        )
        .await;
        self.runtime.stop(&spec.id, GRACE).await.expect("stop");
        spec
    }
}

/// What a VM start leaves beside the volume: "a guest may have written this".
fn as_if_a_guest_ran(image: &Path) {
    std::fs::write(image.with_file_name("volume.guest-written"), "").unwrap();
}

fn hash(image: &Path) -> String {
    let out = Command::new("sha256sum").arg(image).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// debugfs as a guest root's tool: `-w` runs `commands` on the image; without, reads.
fn debugfs(image: &Path, write: bool, commands: &str) -> String {
    let mut cmd = Command::new("debugfs");
    if write {
        cmd.arg("-w");
    }
    let out = cmd.arg("-R").arg(commands).arg(image).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Overwrites the first block of the directory `path` (inside the image) with garbage.
fn corrupt_directory(image: &Path, path: &str) {
    let block: u64 = debugfs(image, false, &format!("blocks {path}"))
        .trim()
        .parse()
        .expect("one block");
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::OpenOptions::new().write(true).open(image).unwrap();
    file.seek(SeekFrom::Start(block * 4096)).unwrap();
    file.write_all(&[0x5A; 4096]).unwrap();
}

/// The super options (last column) and mount options of the mount at `target`.
fn mount_options(target: &Path) -> Option<(String, String)> {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        (Path::new(fields[4]) == target).then(|| {
            let sep = fields.iter().position(|f| *f == "-").unwrap();
            (fields[sep + 3].to_string(), fields[5].to_string())
        })
    })
}

async fn assert_refused_untouched(sandbox: &Sandbox, spec: &BoxSpec) {
    let image = sandbox.image(spec);
    let before = hash(&image);
    let err = sandbox
        .runtime
        .start(&common::next_boot(spec))
        .await
        .expect_err("a damaged guest-written volume must not start");
    let chain = berth_runtime::error_chain(&err);
    for needle in ["failed the host's check", "e2fsck -fn", "VM runtime"] {
        assert!(chain.contains(needle), "{needle}: {chain}");
    }
    assert_eq!(hash(&image), before, "the refused image was changed");
    let mount = image.with_file_name("mnt");
    assert!(
        mount_options(&mount).is_none(),
        "the refused image is mounted"
    );
    assert!(
        image.with_file_name("volume.guest-written").exists(),
        "still to be checked"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_written_clean_flag_over_a_corrupt_directory_is_refused() {
    let Some(sandbox) = Sandbox::new("corrupt_directory") else {
        return;
    };
    let spec = sandbox.stopped_box().await;
    let image = sandbox.image(&spec);
    corrupt_directory(&image, "/home/a");
    as_if_a_guest_ran(&image);
    assert_refused_untouched(&sandbox, &spec).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_written_directory_loop_is_refused() {
    let Some(sandbox) = Sandbox::new("directory_loop") else {
        return;
    };
    let spec = sandbox.stopped_box().await;
    let image = sandbox.image(&spec);
    debugfs(&image, true, "ln /home /home/a/b/up");
    assert!(debugfs(&image, false, "ls /home/a/b").contains("up"));
    as_if_a_guest_ran(&image);
    assert_refused_untouched(&sandbox, &spec).await;
}

/// A guest set `errors=panic`: a valid file system, so it starts, but the host mounts it
/// `errors=remount-ro` (and `nosuid,nodev`), and the check forgets the marker.
#[tokio::test(flavor = "multi_thread")]
async fn errors_panic_from_a_guest_is_mounted_remount_ro_nosuid_nodev() {
    let Some(sandbox) = Sandbox::new("errors_panic") else {
        return;
    };
    let spec = sandbox.stopped_box().await;
    let image = sandbox.image(&spec);
    debugfs(&image, true, "ssv errors 3");
    assert!(debugfs(&image, false, "stats").contains("Errors behavior:          Panic"));
    as_if_a_guest_ran(&image);
    let client = sandbox
        .runtime
        .start(&common::next_boot(&spec))
        .await
        .expect("a sound volume starts")
        .client;
    assert_eq!(
        run_ok(&client, &["cat", "/home/user/a/f"], BoxUser::User).await,
        "hi\n"
    );
    let (sup, mnt) = mount_options(&image.with_file_name("mnt")).expect("mounted");
    assert!(
        sup.split(',').any(|o| o == "errors=remount-ro"),
        "super options: {sup}"
    );
    for opt in ["nosuid", "nodev"] {
        assert!(mnt.split(',').any(|o| o == opt), "{opt}: {mnt}");
    }
    assert!(!image.with_file_name("volume.guest-written").exists());
    sandbox.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// A box booted on qemu has the marker from before its boot on; stopped and started on the
/// sandbox, its (sound) volume passes the full check, mounts, and the marker is gone.
#[tokio::test(flavor = "multi_thread")]
async fn a_vm_boot_marks_the_volume_and_the_sandbox_checks_it_before_mounting() {
    let Some(sandbox) = Sandbox::new("vm_marks") else {
        return;
    };
    if let Err(why) = common::images::vm_binaries() {
        berth_testkit::skip("qemu", format!("vm_marks: {why}"));
        return;
    }
    let images = match tokio::task::spawn_blocking(common::images::images)
        .await
        .unwrap()
    {
        Ok(images) => images,
        Err(why) => {
            berth_testkit::skip("qemu", format!("vm_marks: {why}"));
            return;
        }
    };
    let _slot = common::vm::vm_slot().await;
    let config = QemuConfig::new(sandbox.dir.path(), &images.kernel, &images.initramfs);
    let qemu = match QemuRuntime::new(config).await {
        Ok(qemu) => Arc::new(qemu),
        Err(e @ berth_runtime::RuntimeError::Missing { .. }) => {
            berth_testkit::skip("qemu", format!("vm_marks: {e}"));
            return;
        }
        Err(e) => panic!("QemuRuntime::new: {e}"),
    };
    struct KillVms(Arc<QemuRuntime>);
    impl Drop for KillVms {
        fn drop(&mut self) {
            let left = self.0.kill_all_blocking();
            if !left.is_empty() {
                eprintln!("cleanup could not remove: {left:?}");
            }
        }
    }
    let _vms = KillVms(qemu.clone());

    let mut vm = common::new_spec(Limits::default());
    vm.disk_mib = 64;
    vm.rootfs = Rootfs::Image(images.rootfs.clone());
    vm.limits.memory_mib = vm.limits.memory_mib.min(common::fixture::VM_MEMORY_MIB);
    let image = sandbox.image(&vm);
    let marker = image.with_file_name("volume.guest-written");
    let client = qemu.start(&vm).await.expect("start on qemu").client;
    assert!(marker.exists(), "marked before the guest ran");
    run_ok(
        &client,
        &["sh", "-c", "echo from-the-vm > /home/user/vm"],
        BoxUser::User,
    )
    .await;
    qemu.stop(&vm.id, GRACE).await.expect("stop");
    assert!(
        marker.exists(),
        "a stop does not vouch for what the guest wrote"
    );

    let mut next = common::next_boot(&vm);
    next.rootfs = Rootfs::Host;
    let client = sandbox
        .runtime
        .start(&next)
        .await
        .expect("start on sandbox")
        .client;
    assert_eq!(
        run_ok(&client, &["cat", "/home/user/vm"], BoxUser::User).await,
        "from-the-vm\n"
    );
    assert!(!marker.exists(), "checked in full, then forgotten");
    sandbox.runtime.stop(&next.id, GRACE).await.expect("stop");
}
