//! The `qemu` backend: each box is a QEMU `microvm` booting berth's kernel and initramfs
//! straight into berth-init. Its guest channel is one virtio-serial port whose host end is
//! a per-box channel bridge (`berth-init bridge`): the guest's streams are multiplexed over
//! the port, and the bridge offers the host the same hybrid-vsock sockets Firecracker does.
//! A serial port is what QEMU can migrate, so a box can be snapshotted (`snapshot.rs`).
//!
//! [`QemuRuntime`] is the one VM runtime (`crate::vm::runtime`) over the [`Qemu`] driver
//! (`driver.rs`). Per box and boot (`paths.rs` has the files): the volume image is created
//! on the first start (`volume.rs`); the config disk carries the token, harness,
//! environment, hosts, trust bundle and disk map (`config_disk.rs`); the egress listener is
//! bound (`egress.rs`); the bridge starts, then QEMU (`cmdline.rs` builds its argv; what it
//! launched with is recorded), and `start` returns once berth-init answers through the
//! bridge (`boot.rs`). QMP (`qmp.rs`) quits and migrates; `stop.rs` asks the guest to power
//! off first. The accelerator is KVM only when a probe guest actually runs under it
//! (`accel.rs`).
//!
//! Confinement: QEMU (`-sandbox on`, every option denied) and the bridge (a seccomp filter
//! of berth's) each run as the box's own unprivileged VMM uid, without
//! capabilities, with `no_new_privs`, in a mount namespace holding only the box's files
//! (`crate::vm::jail`), in the box's cgroup with its CPU quota, memory and pids limits
//! (`crate::vm::cgroup`). The box's own files are the uid's only while it runs.
//!
//! Processes and sockets: QEMU and the bridge are the daemon's children, reaped through
//! pidfds, and found again after a daemon crash through pid files whose processes must name
//! the VM dir (`process.rs`). When QEMU exits for any reason its bridge is killed; the next `status`, `start` or `stop` removes the sockets.
//! `wait_exit` waits on QEMU's pidfd and says why the boot ended (`crate::vm::exit`); it
//! also ends a VM that stopped on a full host disk (`disk_full.rs`).

mod accel;
mod boot;
mod cmdline;
mod disk_full;
mod driver;
#[cfg(test)]
mod fake_qmp;
mod launch_record;
mod migration;
mod qmp;
#[cfg(test)]
mod save_tests;
mod snapshot;
mod stop;

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_protocol::BoxId;

pub use accel::{AccelChoice, AccelMode};
pub use cmdline::{kernel_cmdline, Accel};
pub use qmp::{Qmp, QmpError, QmpEvent, RunState};
// The shared VM layout and program lookup, where the qemu tests and users found them.
pub use crate::vm::{find_program, VmLayout, VmPaths};

use crate::process::vmm as process;
use crate::vm::runtime::VmRuntime;
use crate::{Capabilities, RuntimeError};

/// The QEMU binary looked up on `PATH` unless `$BERTH_QEMU` names one.
pub const DEFAULT_QEMU: &str = "qemu-system-x86_64";
/// How long a boot may take to a ready berth-init: generous under TCG, where the kernel
/// alone takes ~2 s on an idle host and, on a 2-core host running builds and other guests,
/// has taken 55 s (a fresh-machine test run that failed at 60).
pub const TCG_BOOT_DEADLINE: Duration = Duration::from_secs(120);
pub const KVM_BOOT_DEADLINE: Duration = Duration::from_secs(20);
/// Pause freezes the QEMU process (see `pause`); a snapshot is QEMU's migration to a file
/// (`snapshot.rs`).
pub const CAPABILITIES: Capabilities = Capabilities {
    pause: true,
    snapshot: true,
    host_rootfs: false,
};
/// How long a SIGSTOP or SIGCONT may take to show in `/proc`.
const SIGNAL_WAIT: Duration = Duration::from_secs(5);

/// How to build a [`QemuRuntime`].
#[derive(Debug, Clone)]
pub struct QemuConfig {
    /// berth's data directory; the backend uses `boxes/<id>/{volume.ext4,vm/}` in it.
    pub data_dir: PathBuf,
    pub qemu_bin: PathBuf,
    /// The static berth-init, run on the host as each box's channel bridge.
    pub bridge_bin: PathBuf,
    /// The guest kernel (`<data>/images/kernel/<key>/vmlinuz`, from `berth-image`).
    pub kernel: PathBuf,
    /// The initramfs holding berth-init and the virtio modules (`berth-image`).
    pub initramfs: PathBuf,
    pub accel: AccelMode,
    /// `None`: [`TCG_BOOT_DEADLINE`] or [`KVM_BOOT_DEADLINE`].
    pub boot_deadline: Option<Duration>,
}

impl QemuConfig {
    /// Defaults: QEMU from `$BERTH_QEMU` or `PATH`, berth-init as [`crate::init_binary`]
    /// finds it (bare names when not found: [`QemuRuntime::new`] then says what is
    /// missing), accelerator probed.
    pub fn new(data_dir: &Path, kernel: &Path, initramfs: &Path) -> QemuConfig {
        QemuConfig {
            data_dir: data_dir.to_path_buf(),
            qemu_bin: find_program("BERTH_QEMU", DEFAULT_QEMU)
                .unwrap_or_else(|| DEFAULT_QEMU.into()),
            bridge_bin: crate::init_binary().unwrap_or_else(|_| "berth-init".into()),
            kernel: kernel.to_path_buf(),
            initramfs: initramfs.to_path_buf(),
            accel: AccelMode::Auto,
            boot_deadline: None,
        }
    }
}

/// What this backend runs with, for `GET /v1/runtimes` and logs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct QemuDescription {
    pub accel: AccelChoice,
    pub qemu: PathBuf,
    pub bridge: PathBuf,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub boot_deadline_ms: u64,
}

/// The QEMU driver of the VM runtime (`crate::vm::runtime`): its `Vmm` is in `driver.rs`.
#[derive(Debug)]
pub struct Qemu {
    config: QemuConfig,
    layout: VmLayout,
    accel: AccelChoice,
    /// The host's TSC rate for the guest command line (`None`: unknown, left out).
    tsc_khz: Option<u64>,
}

/// The `qemu` backend: the one VM runtime driving QEMU.
pub type QemuRuntime = VmRuntime<Qemu>;

impl VmRuntime<Qemu> {
    /// Checks the binaries and images, chooses the accelerator (probing KVM by booting the
    /// kernel when `config.accel` is `Auto`: at most a few seconds, once) and takes over the
    /// CIDs of VMs a previous daemon left running.
    pub async fn new(config: QemuConfig) -> Result<QemuRuntime, RuntimeError> {
        check_executable(
            &config.qemu_bin,
            "QEMU",
            "apt-get install qemu-system-x86 (or set BERTH_QEMU)",
        )?;
        check_executable(
            &config.bridge_bin,
            "berth-init (the channel bridge)",
            "build it with `make init`, or set BERTH_INIT_BIN to a static berth-init",
        )?;
        crate::vm::check_images(&config.kernel, &config.initramfs)?;
        let accel = match config.accel {
            AccelMode::Auto => accel::probe(&config.qemu_bin, &config.kernel).await,
            AccelMode::Kvm => AccelChoice {
                accel: Accel::Kvm,
                reason: "configured".into(),
            },
            AccelMode::Tcg => AccelChoice {
                accel: Accel::Tcg,
                reason: "configured".into(),
            },
        };
        tracing::info!(accel = accel.accel.as_str(), reason = %accel.reason, "qemu accelerator");
        let layout = VmLayout::new(&config.data_dir);
        std::fs::create_dir_all(layout.boxes_dir())
            .map_err(process::io("create", &layout.boxes_dir()))?;
        Ok(VmRuntime {
            vmm: Qemu {
                layout,
                accel,
                tsc_khz: cmdline::host_tsc_khz(),
                config,
            },
        })
    }

    pub fn layout(&self) -> &VmLayout {
        &self.vmm.layout
    }

    pub fn accel(&self) -> Accel {
        self.vmm.accel.accel
    }

    pub fn describe(&self) -> QemuDescription {
        let qemu = &self.vmm;
        QemuDescription {
            accel: qemu.accel.clone(),
            qemu: qemu.config.qemu_bin.clone(),
            bridge: qemu.config.bridge_bin.clone(),
            kernel: qemu.config.kernel.clone(),
            initramfs: qemu.config.initramfs.clone(),
            boot_deadline_ms: qemu.boot_deadline().as_millis() as u64,
        }
    }

    /// The host pid of a box's QEMU, when it runs.
    pub fn qemu_pid(&self, id: &BoxId) -> Option<i32> {
        let paths = self.vmm.layout.box_paths(id);
        process::find(&paths.qemu_pid(), &paths.vm_dir()).map(|p| p.pid())
    }

    /// The host pid of a box's channel bridge, when it runs.
    pub fn bridge_pid(&self, id: &BoxId) -> Option<i32> {
        let paths = self.vmm.layout.box_paths(id);
        process::find(&paths.bridge_pid(), &paths.vm_dir()).map(|p| p.pid())
    }
}

impl Qemu {
    fn boot_deadline(&self) -> Duration {
        self.config.boot_deadline.unwrap_or(match self.accel.accel {
            Accel::Kvm => KVM_BOOT_DEADLINE,
            Accel::Tcg => TCG_BOOT_DEADLINE,
        })
    }
}

/// Gives what a boot handed to its VMM uid (`boot::hand_over`) back to root; the config
/// disk is gone by then.
fn take_back(paths: &VmPaths) -> Result<(), RuntimeError> {
    for path in [paths.volume(), paths.console_log(), paths.run_dir()] {
        match std::os::unix::fs::chown(&path, Some(0), Some(0)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(process::io("chown back to root", &path)(e))
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_executable(path: &Path, what: &str, hint: &str) -> Result<(), RuntimeError> {
    if path.is_file() {
        Ok(())
    } else {
        Err(RuntimeError::Missing {
            what: format!("{what} ({})", path.display()),
            hint: hint.into(),
        })
    }
}

fn signal_failed(paths: &VmPaths, operation: &'static str, pid: i32) -> RuntimeError {
    RuntimeError::Backend {
        program: paths.qemu_pid().display().to_string(),
        operation,
        status: format!(
            "pid {pid} did not change state within {} ms",
            SIGNAL_WAIT.as_millis()
        ),
        stderr: String::new(),
    }
}
