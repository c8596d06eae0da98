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
#[path = "qemu/exit.rs"]
mod exit;
#[path = "qemu/lifecycle.rs"]
mod lifecycle;
#[path = "qemu/snapshot.rs"]
mod snapshot;

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

/// The files of a boot that exist, the launch record included (a stopped box has none).
fn vm_files_left(runtime: &QemuRuntime, id: &berth_protocol::BoxId) -> Vec<PathBuf> {
    let paths = runtime.layout().box_paths(id);
    let mut left = vm::qemu_boot_files_left(&paths);
    left.extend(Some(paths.launch_record()).filter(|p| p.exists()));
    left
}

/// `wait_exit` of the box, in a task of its own.
fn wait_exit_task(
    rt: &Arc<QemuRuntime>,
    id: &berth_protocol::BoxId,
) -> tokio::task::JoinHandle<Result<BoxExit, RuntimeError>> {
    let (rt, id) = (rt.clone(), id.clone());
    tokio::spawn(async move { rt.wait_exit(&id).await })
}
