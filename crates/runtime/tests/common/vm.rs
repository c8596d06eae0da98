//! What the VM backends' tests (qemu, firecracker, the conformance suite on qemu) share:
//! the fixture that kills its VMs on drop, the box spec of a test VM, the files a qemu
//! boot leaves, the guest's kernel and PID 1, a file kept across a cold boot.

use std::path::PathBuf;
use std::sync::Arc;

use berth_protocol::guest::{BoxUser, FileQuery};
use berth_protocol::BoxId;
use berth_runtime::firecracker::FirecrackerRuntime;
use berth_runtime::qemu::{QemuRuntime, VmPaths};
use berth_runtime::{BoxSpec, GuestClient, Limits, Rootfs};
use bytes::Bytes;

use super::images::Images;

const KEPT_CONTENT: &[u8] = b"written in the VM";

/// A VM backend that can kill all its VMs synchronously (for a Drop guard).
pub trait KillAll {
    fn kill_all_blocking(&self) -> Vec<BoxId>;
}

impl KillAll for QemuRuntime {
    fn kill_all_blocking(&self) -> Vec<BoxId> {
        QemuRuntime::kill_all_blocking(self)
    }
}

impl KillAll for FirecrackerRuntime {
    fn kill_all_blocking(&self) -> Vec<BoxId> {
        FirecrackerRuntime::kill_all_blocking(self)
    }
}

/// One VM backend on a fresh data dir. Dropping it (also on panic) kills every VM it
/// started.
/// How many VM fixtures of one test binary run at once under plain `cargo test` (nextest
/// runs each test in its own process and limits them with the `vm` test group instead):
/// every TCG vCPU is a busy host thread, and a starved guest misses its boot deadline.
pub static VM_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// Takes one of the [`VM_SLOTS`] for the length of a test.
pub async fn vm_slot() -> tokio::sync::SemaphorePermit<'static> {
    VM_SLOTS
        .acquire()
        .await
        .expect("the VM slots are never closed")
}

pub struct VmFixture<R: KillAll> {
    pub runtime: Arc<R>,
    pub images: Images,
    pub dir: tempfile::TempDir,
    pub _slot: tokio::sync::SemaphorePermit<'static>,
}

impl<R: KillAll> Drop for VmFixture<R> {
    fn drop(&mut self) {
        let left = self.runtime.kill_all_blocking();
        if !left.is_empty() {
            eprintln!("cleanup could not kill the VMs of: {left:?}");
        }
    }
}

/// A new box spec on the test rootfs image with `limits`; a small volume (a test volume
/// need not be the default 1 GiB).
pub fn vm_spec(images: &Images, limits: Limits) -> BoxSpec {
    let mut spec = super::new_spec(limits);
    spec.rootfs = Rootfs::Image(images.rootfs.clone());
    spec.disk_mib = 64;
    spec
}

/// A new box spec with `memory_mib` of guest memory (tests boot several VMs on a small
/// machine; the default is larger).
pub fn spec_with_memory(images: &Images, memory_mib: u64) -> BoxSpec {
    vm_spec(
        images,
        Limits {
            memory_mib,
            ..Limits::default()
        },
    )
}

/// The files of a qemu boot that exist (a stopped box must have none).
pub fn qemu_boot_files_left(paths: &VmPaths) -> Vec<PathBuf> {
    [
        paths.vhost_user_socket(),
        paths.vsock_socket(),
        paths.egress_socket(),
        paths.qmp_socket(),
        paths.config_disk(),
        paths.qemu_pid(),
        paths.vhost_pid(),
    ]
    .into_iter()
    .filter(|p| p.exists())
    .collect()
}

/// Whether host process `pid` is gone (or a zombie awaiting its reaper).
pub fn exited(pid: i32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z"))
}

/// The guest runs the test kernel, berth-init is its PID 1, and the box user is uid 1001.
pub async fn assert_berth_guest(client: &GuestClient, kernel_version: &str) {
    let release = super::run_ok(client, &["uname", "-r"], BoxUser::User).await;
    assert_eq!(release.trim(), kernel_version);
    super::assert_berth_init_is_pid_1(client).await;
    assert_eq!(
        super::run_ok(client, &["id", "-u"], BoxUser::User)
            .await
            .trim(),
        "1001"
    );
}

/// Writes the file a cold boot must keep; where it is, for [`assert_kept_file`].
pub async fn write_kept_file(client: &GuestClient) -> FileQuery {
    let file = super::file("/home/user/kept.txt");
    client
        .write_file(&file, Bytes::from_static(KEPT_CONTENT))
        .await
        .expect("write");
    file
}

pub async fn assert_kept_file(client: &GuestClient, file: &FileQuery) {
    assert_eq!(&client.read_file(file).await.unwrap()[..], KEPT_CONTENT);
}
