//! One box volume, two runtimes: a box stopped on `sandbox` starts on `qemu` on the same
//! data dir and finds every file with the same owner, mode and content, and the other way
//! round. Both backends use `<data>/boxes/<id>/volume.ext4` with the box's own ids on
//! disk (the sandbox mounts it idmapped), so nothing is converted between them.
//!
//! Needs what both backends need (root, runc, berth-init, qemu, the
//! test images); otherwise each test skips (`berth_testkit::skip`, part `qemu`) and returns. Each VM test
//! takes a host-wide VM slot (`common::vm::vm_slot`).

#[allow(dead_code, unused_imports)]
mod common;

use std::sync::Arc;
use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_runtime::qemu::{QemuConfig, QemuRuntime};
use berth_runtime::sandbox::{SandboxConfig, SandboxRuntime};
use berth_runtime::{BoxSpec, GuestClient, Limits, Rootfs, Runtime};
use common::images::{images, vm_binaries, Images};
use common::run_ok;

const GRACE: Duration = Duration::from_secs(10);
const DISK_MIB: u64 = 64;

/// Both backends on one data dir. Dropping it (also on panic) kills every box either
/// started and releases the sandbox's volume mounts.
struct Both {
    sandbox: Arc<SandboxRuntime>,
    qemu: Arc<QemuRuntime>,
    images: Images,
    _dir: tempfile::TempDir,
    _slot: common::vm::VmSlot,
}

impl Drop for Both {
    fn drop(&mut self) {
        let left = self.sandbox.cleanup_all_blocking();
        let vms = self.qemu.kill_all_blocking();
        if !left.is_empty() || !vms.is_empty() {
            eprintln!("cleanup could not remove: {left:?} {vms:?}");
        }
    }
}

impl Both {
    async fn new(name: &str) -> Option<Both> {
        let skip = |why: &dyn std::fmt::Display| {
            berth_testkit::skip("qemu", format!("{name}: {why}"));
            None
        };
        if !nix::unistd::geteuid().is_root() {
            return skip(&"the sandbox backend needs root");
        }
        if let Err(why) = vm_binaries() {
            return skip(&why);
        }
        let init_bin = match berth_runtime::init_binary() {
            Ok(path) => path,
            Err(e) => return skip(&e),
        };
        let images = match tokio::task::spawn_blocking(images).await.unwrap() {
            Ok(images) => images,
            Err(why) => return skip(&why),
        };
        // Short: socket paths under it must fit in a sockaddr_un.
        let dir = tempfile::Builder::new()
            .prefix("berth-va-")
            .tempdir()
            .unwrap();
        let sandbox = match SandboxRuntime::new(SandboxConfig {
            data_dir: dir.path().to_path_buf(),
            oci_runtime: std::env::var("BERTH_OCI_RUNTIME").unwrap_or_else(|_| "runc".into()),
            init_bin,
        }) {
            Ok(sandbox) => Arc::new(sandbox),
            Err(e @ berth_runtime::RuntimeError::Missing { .. }) => return skip(&e),
            Err(e) => panic!("SandboxRuntime::new: {e}"),
        };
        let slot = common::vm::vm_slot().await;
        let config = QemuConfig::new(dir.path(), &images.kernel, &images.initramfs);
        let qemu = match QemuRuntime::new(config).await {
            Ok(qemu) => Arc::new(qemu),
            Err(e @ berth_runtime::RuntimeError::Missing { .. }) => return skip(&e),
            Err(e) => panic!("QemuRuntime::new: {e}"),
        };
        Some(Both {
            sandbox,
            qemu,
            images,
            _dir: dir,
            _slot: slot,
        })
    }

    /// The next boot of `spec` on the sandbox (the host's rootfs).
    fn on_sandbox(&self, spec: &BoxSpec) -> BoxSpec {
        let mut next = common::next_boot(spec);
        next.rootfs = Rootfs::Host;
        next
    }

    /// The next boot of `spec` on qemu (the test rootfs image).
    fn on_qemu(&self, spec: &BoxSpec) -> BoxSpec {
        let mut next = common::next_boot(spec);
        next.rootfs = Rootfs::Image(self.images.rootfs.clone());
        next.limits.memory_mib = next.limits.memory_mib.min(common::fixture::VM_MEMORY_MIB);
        next
    }
}

fn first_spec() -> BoxSpec {
    let mut spec = common::new_spec(Limits::default());
    spec.disk_mib = DISK_MIB;
    spec
}

/// What a box leaves on its volume: files and a directory of the user, files of root in
/// the user's home and in berth-init's state dir, a symlink, a note in `/memory`.
async fn write_files(client: &GuestClient, tag: &str) {
    run_ok(
        client,
        &[
            "sh",
            "-c",
            &format!(
                "cd /home/user && mkdir -p -m 750 d-{tag} && echo {tag} > d-{tag}/u && \
                 chmod 640 d-{tag}/u && ln -s d-{tag}/u l-{tag} && \
                 echo {tag} > /memory/m-{tag} && chmod 604 /memory/m-{tag}"
            ),
        ],
        BoxUser::User,
    )
    .await;
    run_ok(
        client,
        &[
            "sh",
            "-c",
            &format!(
                "echo {tag} > /home/user/r-{tag} && chmod 600 /home/user/r-{tag} && \
                 echo {tag} > /var/lib/berth/probe-{tag} && chmod 600 /var/lib/berth/probe-{tag}"
            ),
        ],
        BoxUser::Root,
    )
    .await;
}

/// Owner, mode, type and content of what [`write_files`] wrote with `tag`, as box root
/// sees it.
async fn read_files(client: &GuestClient, tag: &str) -> String {
    let files = format!(
        "/home/user /home/user/d-{tag} /home/user/d-{tag}/u /home/user/l-{tag} \
         /home/user/r-{tag} /memory /memory/m-{tag} /var/lib/berth /var/lib/berth/probe-{tag}"
    );
    let script = format!(
        "stat -c '%n %u:%g %a %F' {files} && cat /home/user/l-{tag} /home/user/r-{tag} \
         /memory/m-{tag} /var/lib/berth/probe-{tag}"
    );
    run_ok(client, &["sh", "-c", &script], BoxUser::Root).await
}

fn expected(tag: &str) -> String {
    format!(
        "/home/user 1001:1001 700 directory\n\
         /home/user/d-{tag} 1001:1001 750 directory\n\
         /home/user/d-{tag}/u 1001:1001 640 regular file\n\
         /home/user/l-{tag} 1001:1001 777 symbolic link\n\
         /home/user/r-{tag} 0:0 600 regular file\n\
         /memory 1001:1001 755 directory\n\
         /memory/m-{tag} 1001:1001 604 regular file\n\
         /var/lib/berth 0:0 700 directory\n\
         /var/lib/berth/probe-{tag} 0:0 600 regular file\n\
         {tag}\n{tag}\n{tag}\n{tag}\n"
    )
}

/// sandbox → qemu → sandbox: each runtime reads what the other wrote.
#[tokio::test(flavor = "multi_thread")]
async fn a_box_moves_from_sandbox_to_qemu_and_back_with_its_files() {
    let Some(both) = Both::new("sandbox_to_qemu").await else {
        return;
    };
    let spec = both.on_sandbox(&first_spec());
    let client = both
        .sandbox
        .start(&spec)
        .await
        .expect("start on sandbox")
        .client;
    write_files(&client, "sb").await;
    assert_eq!(read_files(&client, "sb").await, expected("sb"));
    both.sandbox.stop(&spec.id, GRACE).await.expect("stop");

    let vm = both.on_qemu(&spec);
    let client = both.qemu.start(&vm).await.expect("start on qemu").client;
    assert_eq!(read_files(&client, "sb").await, expected("sb"));
    write_files(&client, "vm").await;
    both.qemu.stop(&vm.id, GRACE).await.expect("stop");

    let back = both.on_sandbox(&vm);
    let client = both
        .sandbox
        .start(&back)
        .await
        .expect("start on sandbox again")
        .client;
    assert_eq!(read_files(&client, "vm").await, expected("vm"));
    assert_eq!(read_files(&client, "sb").await, expected("sb"));
    both.sandbox.stop(&back.id, GRACE).await.expect("stop");
    assert!(!both.sandbox.volume_mounted(&back.id));
}

/// qemu makes the volume; the sandbox reads it, including what berth-init keeps in its
/// state dir.
#[tokio::test(flavor = "multi_thread")]
async fn a_volume_made_by_qemu_starts_on_the_sandbox() {
    let Some(both) = Both::new("qemu_to_sandbox").await else {
        return;
    };
    let vm = both.on_qemu(&first_spec());
    let client = both.qemu.start(&vm).await.expect("start on qemu").client;
    write_files(&client, "vm").await;
    let state = run_ok(&client, &["ls", "-A", "/var/lib/berth"], BoxUser::Root).await;
    both.qemu.stop(&vm.id, GRACE).await.expect("stop");

    let spec = both.on_sandbox(&vm);
    let client = both
        .sandbox
        .start(&spec)
        .await
        .expect("start on sandbox")
        .client;
    assert_eq!(read_files(&client, "vm").await, expected("vm"));
    // berth-init's own state from the VM boot is there (the sandbox boot may add to it).
    let now = run_ok(&client, &["ls", "-A", "/var/lib/berth"], BoxUser::Root).await;
    for name in state.lines() {
        assert!(now.lines().any(|n| n == name), "{name} lost: {now}");
    }
    both.sandbox.stop(&spec.id, GRACE).await.expect("stop");
}
