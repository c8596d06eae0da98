//! The small driver the VM runtime (`runtime.rs`) drives a box through: what differs
//! between QEMU and Firecracker and nothing else. The runtime owns the order of steps, the
//! state checks, the timings and the cleanup after a failure; a driver plans and launches
//! its VMM, pauses, resumes, saves and loads it, asks its guest to power off and kills it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use berth_protocol::BoxId;

use super::snapshot::KeptSnapshot;
use super::{VmLayout, VmPaths};
use crate::process::vmm::VmProcess;
use crate::{BoxSpec, Capabilities, EgressListener, IdMap, RuntimeError, RuntimeStatus};

/// Where a driver keeps one box's files: the shared VM layout plus its own sockets and
/// pid files.
pub(crate) trait BoxFiles: Send + Sync {
    fn vm(&self) -> &VmPaths;

    /// The VMM's pid file: the box runs while its process does.
    fn vmm_pid(&self) -> PathBuf;

    /// Every process of a boot, the VMM first (a helper such as QEMU's channel bridge
    /// after it).
    fn pid_files(&self) -> Vec<PathBuf>;

    /// What one boot leaves and the next must not find.
    fn boot_files(&self) -> Vec<PathBuf>;

    /// The host end of the guest channel (hybrid vsock, the same for both VMMs).
    fn vsock_socket(&self) -> PathBuf;
}

/// A VMM started for a box, its guest not answering yet.
pub(crate) struct Launched {
    pub pid: i32,
    pub egress: EgressListener,
    /// Where this boot's output starts in the console log.
    pub console_from: u64,
}

/// An end of a boot that a driver sees other than by its VMM exiting.
pub(crate) enum SeenEnd {
    /// The guest powered off or reset but the VMM runs on (Firecracker without ACPI): the
    /// exit files say how it ended.
    GuestHalted,
    /// The VM stopped because the host's disk is full; the reason is what the user reads.
    /// The runtime records it and kills the VMM.
    HostDiskFull(String),
}

/// One VMM (QEMU, Firecracker) as the VM runtime drives it.
#[async_trait]
pub(crate) trait Vmm: Send + Sync + 'static {
    /// What [`Vmm::plan`] makes: the disks and the launch of one boot.
    type Plan: Send;
    type Files: BoxFiles;

    /// The backend's name: `qemu`, `firecracker`.
    const NAME: &'static str;
    /// The VMM's program as a user reads it: `QEMU`, `Firecracker`.
    const PROGRAM: &'static str;
    /// What its boxes can do beyond start and stop.
    const CAPABILITIES: Capabilities;
    /// The files a whole snapshot has in the box's snapshot dir.
    const SNAPSHOT_FILES: &'static [&'static str];
    /// The longest one `info` call of the wait for a booting guest may take.
    const READY_ATTEMPT: Duration;

    fn layout(&self) -> &VmLayout;

    fn files(&self, box_dir: &Path) -> Self::Files;

    /// How long a boot (or a restore) may take to a ready berth-init.
    fn boot_deadline(&self) -> Duration;

    /// The log that says why the VMM ended, and every log a running boot appends to
    /// (kept bounded while it runs).
    fn vmm_log(&self, files: &Self::Files) -> PathBuf;
    fn logs(&self, files: &Self::Files) -> Vec<PathBuf>;

    /// What the VMM said as it exited during a boot, for the error.
    fn exited(&self, files: &Self::Files) -> String;

    /// The box's disks and its VMM's launch for `spec`: the box's dirs and volume made,
    /// nothing started.
    async fn plan(&self, spec: &BoxSpec, files: &Self::Files) -> Result<Self::Plan, RuntimeError>;

    /// Confines and starts the VMM with `plan` and boots the guest. Leaves every trace
    /// where [`Vmm::unconfine`] and the runtime's cleanup look.
    async fn launch(
        &self,
        spec: &BoxSpec,
        files: &Self::Files,
        plan: Self::Plan,
    ) -> Result<Launched, RuntimeError>;

    /// As [`Vmm::launch`], but the guest is the box's kept snapshot, loaded and running.
    async fn load(
        &self,
        spec: &BoxSpec,
        files: &Self::Files,
        plan: Self::Plan,
    ) -> Result<Launched, RuntimeError>;

    /// Whether a VMM that runs has its guest running or paused.
    async fn run_state(
        &self,
        files: &Self::Files,
        vmm: &VmProcess,
    ) -> Result<RuntimeStatus, RuntimeError>;

    async fn pause(&self, files: &Self::Files, vmm: &VmProcess) -> Result<(), RuntimeError>;

    async fn resume(&self, files: &Self::Files, vmm: &VmProcess) -> Result<(), RuntimeError>;

    /// Saves the guest (`status`: running or paused) into the box's kept snapshot and leaves
    /// it halted for [`Vmm::kill`]. On an error nothing is kept and the guest goes on as it
    /// was; when it cannot be made to, that is the error.
    async fn save(
        &self,
        id: &BoxId,
        files: &Self::Files,
        vmm: &VmProcess,
        status: RuntimeStatus,
    ) -> Result<(), RuntimeError>;

    /// Asks the guest to power off (thawing a paused one first) and waits for that, at
    /// most `grace`. The runtime kills the VMM if it still runs after.
    async fn power_off(&self, id: &BoxId, files: &Self::Files, vmm: &VmProcess, grace: Duration);

    /// Ends the VMM now. Err when it outlives SIGKILL.
    async fn kill(&self, files: &Self::Files, vmm: &VmProcess) -> Result<(), RuntimeError>;

    /// Resolves when the boot ends in a way the VMM's exit does not show (see [`SeenEnd`]).
    /// Never resolves for a VMM without such an end.
    async fn watch_end(&self, files: &Self::Files) -> SeenEnd;

    /// Undoes a boot's confinement once its processes are gone (cgroup, jail, ownership).
    fn unconfine(&self, id: &BoxId, files: &Self::Files) -> Result<(), RuntimeError>;

    /// The host end of the box's egress channel, owned by whom the VMM runs as.
    fn bind_egress(
        &self,
        files: &Self::Files,
        id_map: IdMap,
    ) -> Result<EgressListener, RuntimeError>;

    /// Host memory the running box holds.
    async fn memory_held(&self, id: &BoxId, vmm: &VmProcess) -> Result<Option<u64>, RuntimeError>;

    fn kept(&self, files: &Self::Files) -> KeptSnapshot {
        KeptSnapshot::of(files.vm(), Self::SNAPSHOT_FILES)
    }
}
