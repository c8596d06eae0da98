//! The firecracker backend booting real microVMs: the same images as the qemu tests
//! (tests/common/images.rs), but the kernel as an uncompressed `vmlinux`, which Firecracker
//! needs on x86_64 (`$BERTH_FIRECRACKER_KERNEL`: e.g. the `vmlinux` that `berth image build`
//! extracts from the test kernel's `vmlinuz` (`berth_image::vmlinux`, recorded in
//! `<data>/images/built.json`), so its modules match the initramfs).
//!
//! Needs a `firecracker` binary (`$BERTH_FIRECRACKER` or `PATH`) and a KVM that runs guests
//! (`FirecrackerRuntime::new` boots a probe guest); otherwise each test skips
//! (`berth_testkit::skip`, part `firecracker`) and returns. The checks are the qemu tests'
//! where both apply.

#[allow(dead_code, unused_imports)]
mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_protocol::guest::BoxUser;
use berth_runtime::firecracker::{FirecrackerConfig, FirecrackerRuntime, DEFAULT_FIRECRACKER};
use berth_runtime::{Runtime, RuntimeError, RuntimeStatus};
use common::run_ok;
use common::vm;

const GRACE: Duration = Duration::from_secs(10);

/// One firecracker backend on a fresh data dir; dropping it kills every VM it started.
type Fixture = vm::VmFixture<FirecrackerRuntime>;

/// Why this host cannot run the tests, checked cheapest first.
async fn fixture(name: &str) -> Result<Fixture, String> {
    if berth_runtime::qemu::find_program("BERTH_FIRECRACKER", DEFAULT_FIRECRACKER).is_none() {
        return Err(format!(
            "no {DEFAULT_FIRECRACKER} binary (install a release, or set BERTH_FIRECRACKER)"
        ));
    }
    let vmlinux = std::env::var_os("BERTH_FIRECRACKER_KERNEL")
        .map(PathBuf::from)
        .ok_or("BERTH_FIRECRACKER_KERNEL does not name a vmlinux of the test kernel")?;
    let images = common::images::images()?;
    let dir = tempfile::Builder::new()
        .prefix(&format!("berth-fc-{name}-"))
        .tempdir()
        .map_err(|e| e.to_string())?;
    let config = FirecrackerConfig::new(dir.path(), &vmlinux, &images.initramfs);
    match FirecrackerRuntime::new(config).await {
        Ok(runtime) => Ok(Fixture {
            runtime: Arc::new(runtime),
            images,
            dir,
            _slot: vm::vm_slot().await,
        }),
        // No binary, no vmlinux, no working KVM: this host cannot run the backend.
        Err(e @ RuntimeError::Missing { .. }) => Err(e.to_string()),
        Err(e) => panic!("{}", berth_runtime::error_chain(&e)),
    }
}

/// The qemu test's check on Firecracker: its own kernel, berth-init as PID 1, a file kept
/// across a stop and a cold boot, pause/resume through Firecracker's API, the old boot's
/// token refused, nothing left after stop and remove.
#[tokio::test(flavor = "multi_thread")]
async fn boots_pauses_and_keeps_files_across_a_cold_boot() {
    let fx = match fixture("persist").await {
        Ok(fx) => fx,
        Err(why) => {
            berth_testkit::skip("firecracker", &why);
            return;
        }
    };
    let rt = &fx.runtime;
    let spec = vm::spec_with_memory(&fx.images, 256);
    let t0 = Instant::now();
    let client = rt.start(&spec).await.expect("start").client;
    eprintln!("cold boot to ready: {:?}", t0.elapsed());
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Running);
    let pid = rt.firecracker_pid(&spec.id).expect("firecracker runs");

    vm::assert_berth_guest(&client, &fx.images.kernel_version).await;

    rt.pause(&spec.id).await.expect("pause");
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Paused);
    rt.resume(&spec.id).await.expect("resume");
    assert_eq!(
        run_ok(&client, &["echo", "thawed"], BoxUser::User)
            .await
            .trim(),
        "thawed"
    );

    let file = vm::write_kept_file(&client).await;
    rt.stop(&spec.id, GRACE).await.expect("stop");
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Stopped);
    assert!(vm::exited(pid), "firecracker outlived stop");
    assert!(rt.list().await.unwrap().is_empty());

    let client = rt
        .start(&common::next_boot(&spec))
        .await
        .expect("cold boot again")
        .client;
    vm::assert_kept_file(&client, &file).await;
    common::assert_old_token_refused(rt.as_ref(), &spec).await;
    rt.remove(&spec.id).await.expect("remove");
    assert!(!rt.layout().box_paths(&spec.id).box_dir().exists());
}
