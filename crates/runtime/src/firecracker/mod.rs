//! The `firecracker` backend: each box is a Firecracker microVM booting berth's kernel
//! (an uncompressed `vmlinux`) and initramfs straight into berth-init.
//!
//! [`FirecrackerRuntime`] is the one VM runtime (`crate::vm::runtime`) over the
//! [`Firecracker`] driver (`driver.rs`). It shares the qemu backend's backend-neutral
//! parts: the box layout, the volume and
//! layer images, the config disk, the egress listener and process supervision. Firecracker
//! is driven through its REST API on a Unix socket (`api.rs` has the bodies, `client.rs`
//! sends them); its vsock is natively hybrid, with the same sockets a qemu box's channel bridge
//! offers (`<vm>/vsock.sock`, guest → host port 2025 on `<vm>/vsock.sock_2025`), so
//! the guest channel and egress work unchanged. Pause and resume are Firecracker's own
//! `PATCH /vm`; `stop.rs` asks the guest to stop through Ctrl-Alt-Del.

pub mod api;
mod boot;
pub mod client;
mod cmdline;
mod driver;
pub mod drives;
#[cfg(test)]
mod fake;
mod jail;
mod jail_clean;
#[cfg(test)]
mod jail_tests;
mod paths;
mod probe;
#[cfg(test)]
mod runtime_tests;
mod snapshot;
#[cfg(test)]
mod snapshot_tests;
mod stop;

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_protocol::BoxId;

pub use boot::{boot_requests, configure_and_start, vcpus, VmSetup, GUEST_CID};
pub use client::{ApiClient, ApiError};
pub use cmdline::{
    exec_name, firecracker_args, instance_id, JailerConfig, BOOT_ARGS, DEFAULT_JAILER,
};
pub use paths::FcPaths;
pub use probe::kernel_problem;

use crate::process::vmm as process;
use crate::vm::runtime::VmRuntime;
use crate::vm::{find_program, VmLayout};
use crate::{Capabilities, RuntimeError};

/// The Firecracker binary looked up on `PATH` unless `$BERTH_FIRECRACKER` names one.
pub const DEFAULT_FIRECRACKER: &str = "firecracker";
/// How long a boot may take to a ready berth-init (Firecracker always runs under KVM).
pub const BOOT_DEADLINE: Duration = Duration::from_secs(20);
/// Snapshots: Firecracker's own create and load (`snapshot.rs`).
pub const CAPABILITIES: Capabilities = Capabilities {
    pause: true,
    snapshot: true,
    host_rootfs: false,
};

/// How to build a [`FirecrackerRuntime`].
#[derive(Debug, Clone)]
pub struct FirecrackerConfig {
    /// berth's data directory; the backend uses `boxes/<id>/{volume.ext4,vm/}` in it.
    pub data_dir: PathBuf,
    pub firecracker_bin: PathBuf,
    /// An uncompressed ELF `vmlinux` (Firecracker does not boot a bzImage on x86_64).
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// Run Firecracker under its jailer: chrooted, as the box's own unprivileged uid/gid,
    /// each boot's files staged into the chroot (`jail.rs`) and removed after it
    /// (`jail_clean.rs`). `None` runs Firecracker as host root, un-jailed: only on an
    /// explicit request (`berth up --firecracker-unjailed`), and said loudly.
    pub jailer: Option<JailerConfig>,
    pub boot_deadline: Duration,
}

impl FirecrackerConfig {
    /// Defaults: the binary from `$BERTH_FIRECRACKER` or `PATH` (the bare name when not
    /// found: [`FirecrackerRuntime::new`] then says it is missing), under the jailer
    /// ([`JailerConfig::new`]).
    pub fn new(data_dir: &Path, kernel: &Path, initramfs: &Path) -> FirecrackerConfig {
        FirecrackerConfig {
            data_dir: data_dir.to_path_buf(),
            firecracker_bin: find_program("BERTH_FIRECRACKER", DEFAULT_FIRECRACKER)
                .unwrap_or_else(|| DEFAULT_FIRECRACKER.into()),
            kernel: kernel.to_path_buf(),
            initramfs: initramfs.to_path_buf(),
            jailer: Some(JailerConfig::new(data_dir)),
            boot_deadline: BOOT_DEADLINE,
        }
    }
}

/// What this backend runs with, for `GET /v1/runtimes` and logs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FirecrackerDescription {
    pub firecracker: PathBuf,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    /// Why KVM is believed to work (the probe's finding).
    pub kvm: String,
    pub jailer: bool,
    /// Set when Firecracker runs un-jailed: what that means, for `berth runtime ls`.
    pub notice: Option<String>,
    pub boot_deadline_ms: u64,
}

/// What berth says (at start, and in `GET /v1/runtimes`) when Firecracker runs un-jailed.
pub const UNJAILED_NOTICE: &str = "Firecracker runs UN-JAILED as host root (--firecracker-unjailed): a guest that escapes into the VMM is root on this host";

/// The Firecracker driver of the VM runtime (`crate::vm::runtime`): its `Vmm` is in
/// `driver.rs`.
#[derive(Debug)]
pub struct Firecracker {
    config: FirecrackerConfig,
    layout: VmLayout,
    kvm: String,
}

/// The `firecracker` backend: the one VM runtime driving Firecracker.
pub type FirecrackerRuntime = VmRuntime<Firecracker>;

impl VmRuntime<Firecracker> {
    /// Checks the binary and images and probes KVM by booting the kernel under
    /// Firecracker (at most a few seconds). Without a binary, a `vmlinux` or a KVM that
    /// runs a guest: [`RuntimeError::Missing`] saying which.
    pub async fn new(config: FirecrackerConfig) -> Result<FirecrackerRuntime, RuntimeError> {
        if !config.firecracker_bin.is_file() {
            return Err(RuntimeError::Missing {
                what: format!("Firecracker ({})", config.firecracker_bin.display()),
                hint: "install a release binary from github.com/firecracker-microvm/firecracker/releases (or set BERTH_FIRECRACKER)".into(),
            });
        }
        if let Some(jailer) = &config.jailer {
            if !jailer.jailer_bin.is_file() {
                return Err(RuntimeError::Missing {
                    what: format!("the Firecracker jailer ({})", jailer.jailer_bin.display()),
                    hint: "it ships beside firecracker in the release tarball (or set BERTH_JAILER); only knowingly: `berth up --firecracker-unjailed` runs Firecracker as host root without it".into(),
                });
            }
            if !exec_name(&config.firecracker_bin)
                .to_string_lossy()
                .contains("firecracker")
            {
                return Err(RuntimeError::Missing {
                    what: format!(
                        "a Firecracker binary the jailer accepts ({} is not named *firecracker*)",
                        config.firecracker_bin.display()
                    ),
                    hint: "the jailer execs only a file whose name contains `firecracker`".into(),
                });
            }
        }
        crate::vm::check_images(&config.kernel, &config.initramfs)?;
        if let Some(problem) = probe::kernel_problem(&config.kernel) {
            return Err(RuntimeError::Missing {
                what: format!("an uncompressed vmlinux kernel for Firecracker: {problem}"),
                hint: "`berth image build` extracts one from the kernel (recorded as `vmlinux` in <data>/images/built.json): pass that file, or give `berth image build --kernel` an ELF vmlinux".into(),
            });
        }
        let layout = VmLayout::new(&config.data_dir);
        std::fs::create_dir_all(layout.boxes_dir())
            .map_err(crate::error::io("create", &layout.boxes_dir()))?;
        let kvm = probe::probe_kvm(&config.firecracker_bin, &config.kernel, layout.data_dir())
            .await
            .map_err(|why| RuntimeError::Missing {
                what: "a KVM that runs guests".into(),
                hint: format!("Firecracker needs hardware virtualisation: {why}"),
            })?;
        match &config.jailer {
            Some(_) => tracing::info!(kvm = %kvm, "firecracker backend (jailed)"),
            None => tracing::warn!(kvm = %kvm, "{UNJAILED_NOTICE}"),
        }
        let runtime = VmRuntime {
            vmm: Firecracker {
                config,
                layout,
                kvm,
            },
        };
        runtime.sweep_jails()?;
        Ok(runtime)
    }

    /// Undoes the jails of boxes whose Firecracker is gone (a crashed daemon's leftovers:
    /// mounts, chroot dirs, cgroups, the volume's owner).
    fn sweep_jails(&self) -> Result<(), RuntimeError> {
        if self.vmm.config.jailer.is_none() {
            return Ok(());
        }
        for (id, paths) in self.box_dirs()? {
            if self.find(&paths).is_some() {
                continue;
            }
            // One box's stuck mount must not take the backend down: its next start or
            // stop undoes the jail again, and fails there if it still cannot.
            if let Err(e) = self.vmm.unjail(&id, &paths) {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot undo a leftover jail");
            }
        }
        Ok(())
    }

    pub fn layout(&self) -> &VmLayout {
        &self.vmm.layout
    }

    pub fn describe(&self) -> FirecrackerDescription {
        let fc = &self.vmm;
        FirecrackerDescription {
            firecracker: fc.config.firecracker_bin.clone(),
            kernel: fc.config.kernel.clone(),
            initramfs: fc.config.initramfs.clone(),
            kvm: fc.kvm.clone(),
            jailer: fc.config.jailer.is_some(),
            notice: fc
                .config
                .jailer
                .is_none()
                .then(|| UNJAILED_NOTICE.to_owned()),
            boot_deadline_ms: fc.config.boot_deadline.as_millis() as u64,
        }
    }

    /// The host pid of a box's Firecracker, when it runs.
    pub fn firecracker_pid(&self, id: &BoxId) -> Option<i32> {
        self.find(&self.files(id)).map(|p| p.pid())
    }
}

impl Firecracker {
    /// Undoes what a jailed boot of `id` staged; nothing to do without a jailer.
    fn unjail(&self, id: &BoxId, paths: &FcPaths) -> Result<(), RuntimeError> {
        let Some(jailer) = &self.config.jailer else {
            return Ok(());
        };
        let bin = &self.config.firecracker_bin;
        let instance = instance_id(id);
        let parent = PathBuf::from(exec_name(bin));
        jail_clean::unjail(&jail_clean::Jail {
            jail_dir: &jailer.jail_dir(bin, id),
            cgroup_parent: &parent,
            instance: &instance,
            volume: &paths.vm().volume(),
        })
    }

    fn fc_paths(&self, box_dir: &Path) -> FcPaths {
        if self.config.jailer.is_some() {
            FcPaths::jailed_at(box_dir)
        } else {
            FcPaths::at(box_dir)
        }
    }

    async fn set_vm_state(
        &self,
        paths: &FcPaths,
        operation: &'static str,
        to: api::VmStateRequest,
    ) -> Result<(), RuntimeError> {
        ApiClient::new(&paths.api_socket())
            .call(&api::ApiRequest::vm_state(to))
            .await
            .map(drop)
            .map_err(|e| api_failed(operation, &e, &paths.vm().console_log()))
    }
}

/// A refused or failed API call as the runtime's error, with the console's last lines.
fn api_failed(operation: &'static str, error: &ApiError, console: &Path) -> RuntimeError {
    RuntimeError::Backend {
        program: "firecracker".into(),
        operation,
        status: crate::error_chain(error),
        stderr: process::log_tail(console),
    }
}
