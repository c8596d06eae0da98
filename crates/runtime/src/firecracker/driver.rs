//! Firecracker as the VM runtime's driver: a box's files are the VM layout with
//! Firecracker's API socket and pid file (under the jailer, its sockets in `vm/run/`);
//! pause and resume are its own `PATCH /vm`, its state its `GET /`; the rest is in
//! `boot.rs`, `snapshot.rs` and `stop.rs`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use berth_protocol::BoxId;

use super::api::{self, VmStateRequest};
use super::boot::Plan;
use super::client::ApiClient;
use super::paths::FcPaths;
use super::{api_failed, Firecracker};
use crate::process::vmm::VmProcess;
use crate::vm::runtime::KILL_WAIT;
use crate::vm::vmm::{BoxFiles, Launched, SeenEnd, Vmm};
use crate::vm::{VmLayout, VmPaths};
use crate::{BoxSpec, Capabilities, EgressListener, IdMap, RuntimeError, RuntimeStatus};

impl BoxFiles for FcPaths {
    fn vm(&self) -> &VmPaths {
        FcPaths::vm(self)
    }

    fn vmm_pid(&self) -> PathBuf {
        self.pid_file()
    }

    fn pid_files(&self) -> Vec<PathBuf> {
        vec![self.pid_file()]
    }

    fn boot_files(&self) -> Vec<PathBuf> {
        FcPaths::boot_files(self)
    }

    fn vsock_socket(&self) -> PathBuf {
        FcPaths::vsock_socket(self)
    }
}

#[async_trait]
impl Vmm for Firecracker {
    type Plan = Plan;
    type Files = FcPaths;

    const NAME: &'static str = "firecracker";
    const PROGRAM: &'static str = "Firecracker";
    const CAPABILITIES: Capabilities = super::CAPABILITIES;
    const SNAPSHOT_FILES: &'static [&'static str] = super::snapshot::FILES;
    const READY_ATTEMPT: Duration = Duration::from_secs(5);

    fn layout(&self) -> &VmLayout {
        &self.layout
    }

    fn files(&self, box_dir: &Path) -> FcPaths {
        self.fc_paths(box_dir)
    }

    fn boot_deadline(&self) -> Duration {
        self.config.boot_deadline
    }

    /// Firecracker's stdout and stderr are the serial console.
    fn vmm_log(&self, files: &FcPaths) -> PathBuf {
        files.vm().console_log()
    }

    fn logs(&self, files: &FcPaths) -> Vec<PathBuf> {
        vec![files.vm().console_log()]
    }

    fn exited(&self, _files: &FcPaths) -> String {
        "Firecracker exited".to_owned()
    }

    async fn plan(&self, spec: &BoxSpec, files: &FcPaths) -> Result<Plan, RuntimeError> {
        Firecracker::plan(self, spec, files).await
    }

    async fn launch(
        &self,
        spec: &BoxSpec,
        files: &FcPaths,
        plan: Plan,
    ) -> Result<Launched, RuntimeError> {
        Firecracker::launch(self, spec, files, plan).await
    }

    async fn load(
        &self,
        spec: &BoxSpec,
        files: &FcPaths,
        plan: Plan,
    ) -> Result<Launched, RuntimeError> {
        Firecracker::load(self, spec, files, plan).await
    }

    /// Firecracker's own `GET /`.
    async fn run_state(
        &self,
        files: &FcPaths,
        _vmm: &VmProcess,
    ) -> Result<RuntimeStatus, RuntimeError> {
        let info = ApiClient::new(&files.api_socket())
            .instance_info()
            .await
            .map_err(|e| api_failed("status", &e, &files.vm().console_log()))?;
        Ok(match info.state {
            api::InstanceState::Paused => RuntimeStatus::Paused,
            // "Not started": mid-boot, which `start` owns; the VMM runs.
            api::InstanceState::Running | api::InstanceState::NotStarted => RuntimeStatus::Running,
        })
    }

    async fn pause(&self, files: &FcPaths, _vmm: &VmProcess) -> Result<(), RuntimeError> {
        self.set_vm_state(files, "pause", VmStateRequest::Paused)
            .await
    }

    async fn resume(&self, files: &FcPaths, _vmm: &VmProcess) -> Result<(), RuntimeError> {
        self.set_vm_state(files, "resume", VmStateRequest::Resumed)
            .await
    }

    async fn save(
        &self,
        id: &BoxId,
        files: &FcPaths,
        _vmm: &VmProcess,
        status: RuntimeStatus,
    ) -> Result<(), RuntimeError> {
        Firecracker::save(self, id, files, status).await
    }

    async fn power_off(&self, id: &BoxId, files: &FcPaths, vmm: &VmProcess, grace: Duration) {
        Firecracker::power_off(self, id, files, vmm, grace).await
    }

    async fn kill(&self, files: &FcPaths, vmm: &VmProcess) -> Result<(), RuntimeError> {
        if !vmm.kill(KILL_WAIT).await {
            return Err(crate::vm::still_alive(
                &files.pid_file(),
                vmm.pid(),
                KILL_WAIT,
            ));
        }
        Ok(())
    }

    /// A guest that powered off without ACPI halts and Firecracker keeps running: its
    /// console says so.
    async fn watch_end(&self, files: &FcPaths) -> SeenEnd {
        super::stop::guest_halted(files.vm()).await;
        SeenEnd::GuestHalted
    }

    fn unconfine(&self, id: &BoxId, files: &FcPaths) -> Result<(), RuntimeError> {
        self.unjail(id, files)
    }

    /// Where this boot's Firecracker delivers port 2025 (the jailed Firecracker's uid's:
    /// it connects to it).
    fn bind_egress(&self, files: &FcPaths, id_map: IdMap) -> Result<EgressListener, RuntimeError> {
        let owner = self
            .config
            .jailer
            .as_ref()
            .map(|_| crate::vm::vmm_owner(id_map));
        crate::vm::egress::bind(&files.egress_socket(), owner)
    }

    /// Firecracker's RSS: the guest RAM it has touched plus its own. (Un-jailed it runs in
    /// no cgroup of berth's; jailed, in the jailer's.)
    async fn memory_held(&self, _id: &BoxId, vmm: &VmProcess) -> Result<Option<u64>, RuntimeError> {
        Ok(vmm.rss_bytes())
    }
}
