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

/// How many test VMs run at once on this host, across every test process (plain `cargo
/// test` runs a binary's tests as threads, nextest runs each in a process, and several
/// runs may share the host): every TCG vCPU is a busy host thread, and a starved guest
/// misses its boot deadline.
const VM_SLOTS: usize = 2;
const SLOT_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// One host-wide VM slot: an exclusive `flock` on `/tmp/berth-test-vm-slot-<n>`, released
/// when the file closes (also when the test process dies).
#[derive(Debug)]
pub struct VmSlot(#[allow(dead_code)] std::fs::File);

/// Takes one of the [`VM_SLOTS`], waiting for a test elsewhere to free one.
pub async fn vm_slot() -> VmSlot {
    use std::os::fd::AsRawFd;
    loop {
        for n in 0..VM_SLOTS {
            let path = std::env::temp_dir().join(format!("berth-test-vm-slot-{n}"));
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&path)
                .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
            // SAFETY: flock on an fd we own; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return VmSlot(file);
            }
        }
        tokio::time::sleep(SLOT_RETRY).await;
    }
}

/// One VM backend on a fresh data dir. Dropping it (also on panic) kills every VM it
/// started.
pub struct VmFixture<R: KillAll> {
    pub runtime: Arc<R>,
    pub images: Images,
    pub dir: tempfile::TempDir,
    pub _slot: VmSlot,
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
        paths.serial_socket(),
        paths.migration_socket(),
        paths.vsock_socket(),
        paths.egress_socket(),
        paths.qmp_socket(),
        paths.config_disk(),
        paths.qemu_pid(),
        paths.bridge_pid(),
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
