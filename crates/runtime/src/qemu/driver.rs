//! QEMU as the VM runtime's driver: a box's files are the shared VM layout with QEMU's and
//! its channel bridge's pid files; pause is SIGSTOP (a stopped process freezes every vCPU
//! and QEMU's own threads at once, and `/proc` shows it); the rest is in `boot.rs`,
//! `snapshot.rs` and `stop.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use berth_protocol::BoxId;

use super::boot::{one_line, Plan};
use super::{disk_full, Qemu, SIGNAL_WAIT};
use crate::process::vmm::{self as process, VmProcess};
use crate::vm::vmm::{BoxFiles, Launched, SeenEnd, Vmm};
use crate::vm::{egress, VmLayout, VmPaths};
use crate::{BoxSpec, Capabilities, EgressListener, IdMap, RuntimeError, RuntimeStatus};

impl BoxFiles for VmPaths {
    fn vm(&self) -> &VmPaths {
        self
    }

    fn vmm_pid(&self) -> PathBuf {
        self.qemu_pid()
    }

    fn pid_files(&self) -> Vec<PathBuf> {
        vec![self.qemu_pid(), self.bridge_pid()]
    }

    fn boot_files(&self) -> Vec<PathBuf> {
        VmPaths::boot_files(self)
    }

    fn vsock_socket(&self) -> PathBuf {
        VmPaths::vsock_socket(self)
    }
}

#[async_trait]
impl Vmm for Qemu {
    type Plan = Plan;
    type Files = VmPaths;

    const NAME: &'static str = "qemu";
    const PROGRAM: &'static str = "QEMU";
    const CAPABILITIES: Capabilities = super::CAPABILITIES;
    const SNAPSHOT_FILES: &'static [&'static str] = super::snapshot::FILES;
    const READY_ATTEMPT: Duration = Duration::from_secs(10);

    fn layout(&self) -> &VmLayout {
        &self.layout
    }

    fn files(&self, box_dir: &Path) -> VmPaths {
        VmPaths::at(box_dir)
    }

    fn boot_deadline(&self) -> Duration {
        Qemu::boot_deadline(self)
    }

    fn vmm_log(&self, files: &VmPaths) -> PathBuf {
        files.qemu_log()
    }

    fn logs(&self, files: &VmPaths) -> Vec<PathBuf> {
        vec![files.console_log(), files.qemu_log(), files.bridge_log()]
    }

    fn exited(&self, files: &VmPaths) -> String {
        format!(
            "QEMU exited ({})",
            one_line(&process::log_tail(&files.qemu_log()))
        )
    }

    async fn plan(&self, spec: &BoxSpec, files: &VmPaths) -> Result<Plan, RuntimeError> {
        Qemu::plan(self, spec, files).await
    }

    async fn launch(
        &self,
        spec: &BoxSpec,
        files: &VmPaths,
        plan: Plan,
    ) -> Result<Launched, RuntimeError> {
        Qemu::launch(self, spec, files, plan).await
    }

    async fn load(
        &self,
        spec: &BoxSpec,
        files: &VmPaths,
        plan: Plan,
    ) -> Result<Launched, RuntimeError> {
        Qemu::load(self, spec, files, plan).await
    }

    async fn run_state(
        &self,
        _files: &VmPaths,
        vmm: &VmProcess,
    ) -> Result<RuntimeStatus, RuntimeError> {
        Ok(if vmm.is_stopped() {
            RuntimeStatus::Paused
        } else {
            RuntimeStatus::Running
        })
    }

    /// SIGSTOP, not QMP `stop`: the bridge keeps running, and what the host sends
    /// meanwhile waits in the serial socket.
    async fn pause(&self, files: &VmPaths, vmm: &VmProcess) -> Result<(), RuntimeError> {
        vmm.signal(libc::SIGSTOP);
        if !vmm.wait_stopped(true, SIGNAL_WAIT).await {
            return Err(super::signal_failed(files, "pause", vmm.pid()));
        }
        Ok(())
    }

    async fn resume(&self, files: &VmPaths, vmm: &VmProcess) -> Result<(), RuntimeError> {
        vmm.signal(libc::SIGCONT);
        if !vmm.wait_stopped(false, SIGNAL_WAIT).await {
            return Err(super::signal_failed(files, "resume", vmm.pid()));
        }
        Ok(())
    }

    async fn save(
        &self,
        id: &BoxId,
        files: &VmPaths,
        vmm: &VmProcess,
        status: RuntimeStatus,
    ) -> Result<(), RuntimeError> {
        Qemu::save(self, id, files, vmm, status).await
    }

    async fn power_off(&self, id: &BoxId, files: &VmPaths, vmm: &VmProcess, grace: Duration) {
        Qemu::power_off(self, id, files, vmm, grace).await
    }

    async fn kill(&self, files: &VmPaths, vmm: &VmProcess) -> Result<(), RuntimeError> {
        Qemu::kill(files, vmm).await
    }

    /// A VM that stopped on a full host disk (QMP's `BLOCK_IO_ERROR` with ENOSPC).
    async fn watch_end(&self, files: &VmPaths) -> SeenEnd {
        disk_full::stopped_on_enospc(files).await;
        SeenEnd::HostDiskFull(disk_full::reason(files))
    }

    /// Nothing to undo for a box that never booted under a VM (no VM dir).
    fn unconfine(&self, id: &BoxId, files: &VmPaths) -> Result<(), RuntimeError> {
        if !files.vm_dir().exists() {
            return Ok(());
        }
        crate::vm::cgroup::VmCgroup::of(id).remove()?;
        super::take_back(files)
    }

    fn bind_egress(&self, files: &VmPaths, id_map: IdMap) -> Result<EgressListener, RuntimeError> {
        egress::bind(&files.egress_socket(), Some(crate::vm::vmm_owner(id_map)))
    }

    /// The box cgroup's charge: QEMU (the guest's RAM included) and the bridge.
    async fn memory_held(&self, id: &BoxId, _vmm: &VmProcess) -> Result<Option<u64>, RuntimeError> {
        crate::vm::cgroup::memory_used(id)
    }
}
