//! The `firecracker` backend: each box is a Firecracker microVM booting berth's kernel
//! (an uncompressed `vmlinux`) and initramfs straight into berth-init.
//!
//! It shares the qemu backend's backend-neutral parts: the box layout, the volume and
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

use async_trait::async_trait;
use berth_protocol::BoxId;

pub use boot::{boot_requests, configure_and_start, vcpus, VmSetup, GUEST_CID};
pub use client::{ApiClient, ApiError};
pub use cmdline::{
    exec_name, firecracker_args, instance_id, JailerConfig, BOOT_ARGS, DEFAULT_JAILER,
};
pub use paths::FcPaths;
pub use probe::kernel_problem;

use crate::error::wrong_state;
use crate::process::vmm as process;
use crate::vm::{find_program, VmLayout};
use crate::{
    BootToken, Booted, BoxExit, BoxSpec, Capabilities, EgressListener, GuestClient, IdMap, Runtime,
    RuntimeError, RuntimeStatus,
};

/// The Firecracker binary looked up on `PATH` unless `$BERTH_FIRECRACKER` names one.
pub const DEFAULT_FIRECRACKER: &str = "firecracker";
/// How long a boot may take to a ready berth-init (Firecracker always runs under KVM).
pub const BOOT_DEADLINE: Duration = Duration::from_secs(20);
const REMOVE_GRACE: Duration = Duration::from_secs(5);
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

#[derive(Debug)]
pub struct FirecrackerRuntime {
    config: FirecrackerConfig,
    layout: VmLayout,
    kvm: String,
}

impl FirecrackerRuntime {
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
        let runtime = FirecrackerRuntime {
            config,
            layout,
            kvm,
        };
        runtime.sweep_jails()?;
        Ok(runtime)
    }

    /// Undoes the jails of boxes whose Firecracker is gone (a crashed daemon's leftovers:
    /// mounts, chroot dirs, cgroups, the volume's owner).
    fn sweep_jails(&self) -> Result<(), RuntimeError> {
        if self.config.jailer.is_none() {
            return Ok(());
        }
        for (id, paths) in self.box_dirs()? {
            if process::find(&paths.pid_file(), &paths.vm().vm_dir()).is_some() {
                continue;
            }
            // One box's stuck mount must not take the backend down: its next start or
            // stop undoes the jail again, and fails there if it still cannot.
            if let Err(e) = self.unjail(&id, &paths) {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot undo a leftover jail");
            }
        }
        Ok(())
    }

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

    /// The egress listener where this boot's Firecracker delivers port 2025 (the jailed
    /// Firecracker's uid's: it connects to it).
    fn bind_egress(&self, paths: &FcPaths, id_map: IdMap) -> Result<EgressListener, RuntimeError> {
        let owner = self
            .config
            .jailer
            .as_ref()
            .map(|_| crate::vm::vmm_owner(id_map));
        crate::vm::egress::bind(&paths.egress_socket(), owner)
    }

    pub fn layout(&self) -> &VmLayout {
        &self.layout
    }

    pub fn describe(&self) -> FirecrackerDescription {
        FirecrackerDescription {
            firecracker: self.config.firecracker_bin.clone(),
            kernel: self.config.kernel.clone(),
            initramfs: self.config.initramfs.clone(),
            kvm: self.kvm.clone(),
            jailer: self.config.jailer.is_some(),
            notice: self
                .config
                .jailer
                .is_none()
                .then(|| UNJAILED_NOTICE.to_owned()),
            boot_deadline_ms: self.config.boot_deadline.as_millis() as u64,
        }
    }

    /// The host pid of a box's Firecracker, when it runs.
    pub fn firecracker_pid(&self, id: &BoxId) -> Option<i32> {
        let paths = self.box_paths(id);
        process::find(&paths.pid_file(), &paths.vm().vm_dir()).map(|p| p.pid())
    }

    /// Kills every Firecracker under this backend's data dir and removes their boot files,
    /// synchronously (for Drop guards). Returns the boxes whose process would not die.
    pub fn kill_all_blocking(&self) -> Vec<BoxId> {
        let mut left = Vec::new();
        for (id, paths) in self.box_dirs().unwrap_or_default() {
            if let Some(vmm) = process::find(&paths.pid_file(), &paths.vm().vm_dir()) {
                if !vmm.kill_blocking(stop::KILL_WAIT) {
                    left.push(id);
                    continue;
                }
            }
            process::reap_exited(&paths.pid_file());
            for file in paths.boot_files() {
                let _ = std::fs::remove_file(file);
            }
            if let Err(e) = self.unjail(&id, &paths) {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot undo the jail");
            }
        }
        left
    }

    fn box_paths(&self, id: &BoxId) -> FcPaths {
        self.fc_paths(self.layout.box_paths(id).box_dir())
    }

    fn fc_paths(&self, box_dir: &Path) -> FcPaths {
        if self.config.jailer.is_some() {
            FcPaths::jailed_at(box_dir)
        } else {
            FcPaths::at(box_dir)
        }
    }

    /// Box dirs under `boxes/` that have a VM dir (whatever their backend).
    fn box_dirs(&self) -> Result<Vec<(BoxId, FcPaths)>, RuntimeError> {
        Ok(crate::vm::box_dirs(&self.layout)?
            .into_iter()
            .map(|(id, paths)| (id, self.fc_paths(paths.box_dir())))
            .collect())
    }

    /// What runs of the box now, from Firecracker's own `GET /`. A box whose Firecracker
    /// is gone is cleaned up here.
    async fn state(&self, id: &BoxId) -> Result<RuntimeStatus, RuntimeError> {
        let paths = self.box_paths(id);
        if process::find(&paths.pid_file(), &paths.vm().vm_dir()).is_none() {
            self.clean(id, &paths).await?;
            return Ok(RuntimeStatus::Stopped);
        }
        let info = ApiClient::new(&paths.api_socket())
            .instance_info()
            .await
            .map_err(|e| api_failed("status", &e, &paths.vm().console_log()))?;
        Ok(match info.state {
            api::InstanceState::Paused => RuntimeStatus::Paused,
            // "Not started": mid-boot, which `start` owns; the VMM runs.
            api::InstanceState::Running | api::InstanceState::NotStarted => RuntimeStatus::Running,
        })
    }

    /// Kills whatever is left of the box's Firecracker and removes this boot's files (and,
    /// under the jailer, its chroot).
    async fn clean(&self, id: &BoxId, paths: &FcPaths) -> Result<(), RuntimeError> {
        let vm_dir = paths.vm().vm_dir();
        if !vm_dir.exists() {
            return self.unjail(id, paths);
        }
        if let Some(vmm) = process::find(&paths.pid_file(), &vm_dir) {
            if !vmm.kill(stop::KILL_WAIT).await {
                return Err(still_alive(&paths.pid_file(), vmm.pid()));
            }
        }
        // A Firecracker that exited on its own may be unreaped yet: keep how it ended.
        process::reap_exited_into(&paths.pid_file(), &paths.vm().vmm_exit());
        for file in paths.boot_files() {
            crate::fs::remove_if_exists(&file)?;
        }
        self.unjail(id, paths)
    }

    async fn set_vm_state(
        &self,
        id: &BoxId,
        operation: &'static str,
        from: RuntimeStatus,
        to: api::VmStateRequest,
    ) -> Result<(), RuntimeError> {
        let status = self.state(id).await?;
        if status != from {
            let expected = if from == RuntimeStatus::Running {
                "running"
            } else {
                "paused"
            };
            return Err(wrong_state(id, operation, expected, status));
        }
        let paths = self.box_paths(id);
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

fn still_alive(pid_file: &Path, pid: i32) -> RuntimeError {
    crate::vm::still_alive(pid_file, pid, stop::KILL_WAIT)
}

#[async_trait]
impl Runtime for FirecrackerRuntime {
    fn name(&self) -> &'static str {
        "firecracker"
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    /// A cold boot changes the volume under any snapshot, which could then never be
    /// restored safely: it is discarded first.
    async fn start(&self, spec: &BoxSpec) -> Result<Booted, RuntimeError> {
        let status = self.state(&spec.id).await?;
        if status == RuntimeStatus::Stopped {
            self.discard(&spec.id)?;
        }
        let paths = self.box_paths(&spec.id);
        crate::vm::start_or_clean(
            spec,
            status,
            self.boot(spec, &paths),
            self.clean(&spec.id, &paths),
        )
        .await
    }

    async fn rebind_egress(
        &self,
        id: &BoxId,
        id_map: IdMap,
    ) -> Result<EgressListener, RuntimeError> {
        self.bind_egress(&self.box_paths(id), id_map)
    }

    async fn stop(&self, id: &BoxId, grace: Duration) -> Result<(), RuntimeError> {
        self.shut_down(id, grace).await
    }

    async fn pause(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.set_vm_state(
            id,
            "pause",
            RuntimeStatus::Running,
            api::VmStateRequest::Paused,
        )
        .await
    }

    async fn resume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.set_vm_state(
            id,
            "resume",
            RuntimeStatus::Paused,
            api::VmStateRequest::Resumed,
        )
        .await
    }

    async fn status(&self, id: &BoxId) -> Result<RuntimeStatus, RuntimeError> {
        self.state(id).await
    }

    async fn wait_exit(&self, id: &BoxId) -> Result<BoxExit, RuntimeError> {
        self.wait_boot_end(id).await
    }

    fn channel(&self, id: &BoxId, token: &BootToken) -> GuestClient {
        crate::vm::hybrid_client(self.box_paths(id).vsock_socket(), token)
    }

    async fn snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.take_snapshot(id).await
    }

    async fn restore(&self, spec: &BoxSpec, old_token: &BootToken) -> Result<Booted, RuntimeError> {
        self.restore_snapshot(spec, old_token).await
    }

    async fn snapshot_size(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        self.snapshot_bytes(id)
    }

    async fn discard_snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.discard(id)
    }

    /// Firecracker's RSS: the guest RAM it has touched plus its own. (Un-jailed it runs in
    /// no cgroup of berth's; jailed, in the jailer's.)
    async fn memory_held(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        let paths = self.box_paths(id);
        Ok(process::find(&paths.pid_file(), &paths.vm().vm_dir()).and_then(|vmm| vmm.rss_bytes()))
    }

    async fn list(&self) -> Result<Vec<BoxId>, RuntimeError> {
        Ok(self
            .box_dirs()?
            .into_iter()
            .filter(|(_, paths)| process::find(&paths.pid_file(), &paths.vm().vm_dir()).is_some())
            .map(|(id, _)| id)
            .collect())
    }

    async fn remove(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.stop(id, REMOVE_GRACE).await?;
        crate::fs::remove_dir_all_if_exists(
            self.box_paths(id).vm().box_dir(),
            "remove the box directory",
        )
    }
}
