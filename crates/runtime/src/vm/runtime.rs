//! The one `Runtime` of both VM backends, over a [`Vmm`] driver (`vmm.rs`). What a box's
//! lifecycle is made of lives here once: the state checks, start (plan, launch, the wait
//! for berth-init, each timed as a boot phase), stop (the guest powers off, else the VMM
//! is killed), pause, resume, snapshot and restore, finding a box's processes again after
//! a daemon crash, and cleaning up after a boot so nothing of it outlives it.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use berth_protocol::BoxId;

use super::vmm::{BoxFiles, Launched, SeenEnd, Vmm};
use super::{exit, hybrid_client, ReadyWait};
use crate::error::wrong_state;
use crate::process::vmm::{self as process, VmProcess};
use crate::{
    BootPhase, BootPhases, BootToken, Booted, BoxExit, BoxSpec, Capabilities, EgressListener,
    GuestClient, IdMap, Runtime, RuntimeError, RuntimeStatus,
};

/// How long a SIGKILLed VMM process may take to be gone.
pub(crate) const KILL_WAIT: Duration = Duration::from_secs(5);
/// The grace `remove` gives a running box.
const REMOVE_GRACE: Duration = Duration::from_secs(5);

/// A VM backend: the runtime over the VMM `V` (`QemuRuntime`, `FirecrackerRuntime`).
#[derive(Debug)]
pub struct VmRuntime<V> {
    pub(crate) vmm: V,
}

/// The phases of a start as they pass.
struct PhaseClock {
    phases: Vec<BootPhase>,
    at: Instant,
}

impl PhaseClock {
    fn start() -> PhaseClock {
        PhaseClock {
            phases: Vec::new(),
            at: Instant::now(),
        }
    }

    /// Ends the phase `name` now.
    fn lap(&mut self, name: &str) {
        let now = Instant::now();
        let micros = u64::try_from((now - self.at).as_micros()).unwrap_or(u64::MAX);
        self.phases.push(BootPhase {
            name: name.into(),
            micros,
        });
        self.at = now;
    }

    fn total_ms(&self) -> u64 {
        self.phases.iter().map(|p| p.micros).sum::<u64>() / 1000
    }
}

// The bound is this crate's own: only its drivers (`Qemu`, `Firecracker`) make a
// `VmRuntime`, and users see it only through their aliases.
#[allow(private_bounds)]
impl<V: Vmm> VmRuntime<V> {
    pub(crate) fn files(&self, id: &BoxId) -> V::Files {
        self.vmm.files(self.vmm.layout().box_paths(id).box_dir())
    }

    /// The box's VMM, when it runs.
    pub(crate) fn find(&self, files: &V::Files) -> Option<VmProcess> {
        process::find(&files.vmm_pid(), &files.vm().vm_dir())
    }

    /// Box dirs under `boxes/` that have a VM dir (whatever their backend).
    pub(crate) fn box_dirs(&self) -> Result<Vec<(BoxId, V::Files)>, RuntimeError> {
        Ok(super::box_dirs(self.vmm.layout())?
            .into_iter()
            .map(|(id, paths)| (id, self.vmm.files(paths.box_dir())))
            .collect())
    }

    /// What runs of the box now. A box whose VMM is gone is cleaned up here.
    pub(crate) async fn state(&self, id: &BoxId) -> Result<RuntimeStatus, RuntimeError> {
        let files = self.files(id);
        match self.find(&files) {
            None => {
                self.clean(id, &files).await?;
                Ok(RuntimeStatus::Stopped)
            }
            Some(vmm) => self.vmm.run_state(&files, &vmm).await,
        }
    }

    /// Kills whatever of the box's processes is left, removes this boot's files and undoes
    /// its confinement.
    pub(crate) async fn clean(&self, id: &BoxId, files: &V::Files) -> Result<(), RuntimeError> {
        let vm_dir = files.vm().vm_dir();
        if !vm_dir.exists() {
            return self.vmm.unconfine(id, files);
        }
        for pid_file in files.pid_files() {
            if let Some(process) = process::find(&pid_file, &vm_dir) {
                if !process.kill(KILL_WAIT).await {
                    return Err(super::still_alive(&pid_file, process.pid(), KILL_WAIT));
                }
            }
        }
        // A VMM that exited on its own may be unreaped yet: keep how it ended.
        process::reap_exited_into(&files.vmm_pid(), &files.vm().vmm_exit());
        for pid_file in files.pid_files().iter().skip(1) {
            process::reap_exited(pid_file);
        }
        for file in files.boot_files() {
            crate::fs::remove_if_exists(&file)?;
        }
        self.vmm.unconfine(id, files)
    }

    /// Kills every VM process under this backend's data dir and removes their boot files,
    /// synchronously (for Drop guards and emergency shutdown). Returns the boxes whose
    /// processes would not die.
    pub fn kill_all_blocking(&self) -> Vec<BoxId> {
        let mut left = Vec::new();
        for (id, files) in self.box_dirs().unwrap_or_default() {
            let vm_dir = files.vm().vm_dir();
            let mut dead = true;
            for pid_file in files.pid_files() {
                if let Some(process) = process::find(&pid_file, &vm_dir) {
                    dead &= process.kill_blocking(KILL_WAIT);
                }
            }
            if !dead {
                left.push(id);
                continue;
            }
            for pid_file in files.pid_files() {
                process::reap_exited(&pid_file);
            }
            for file in files.boot_files() {
                let _ = std::fs::remove_file(file);
            }
            if let Err(e) = self.vmm.unconfine(&id, &files) {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot undo a VM's confinement");
            }
        }
        left
    }

    /// A cold boot: plan, launch, then the wait for berth-init, each a phase.
    async fn boot(&self, spec: &BoxSpec, files: &V::Files) -> Result<Booted, RuntimeError> {
        let mut clock = PhaseClock::start();
        let plan = self.vmm.plan(spec, files).await?;
        clock.lap("plan");
        let launched = self.vmm.launch(spec, files, plan).await?;
        clock.lap("launch");
        let client = hybrid_client(files.vsock_socket(), &spec.boot_token);
        self.wait_ready(spec, files, &client, &launched).await?;
        clock.lap("guest_ready");
        tracing::info!(box_id = %spec.id, backend = V::NAME, boot_ms = clock.total_ms(), "VM ready");
        Ok(Booted {
            client,
            egress: launched.egress,
            phases: BootPhases(clock.phases),
        })
    }

    async fn wait_ready(
        &self,
        spec: &BoxSpec,
        files: &V::Files,
        client: &GuestClient,
        launched: &Launched,
    ) -> Result<(), RuntimeError> {
        let console_log = files.vm().console_log();
        let wait = ReadyWait {
            id: &spec.id,
            client,
            vmm_pid: launched.pid,
            deadline: self.vmm.boot_deadline(),
            attempt: V::READY_ATTEMPT,
            console_log: &console_log,
            console_from: launched.console_from,
        };
        super::wait_ready(wait, || self.vmm.exited(files)).await
    }

    /// A restore: plan, load the snapshot, then the guest's first call with the old token,
    /// each a phase. The snapshot goes once the box runs again.
    async fn load(
        &self,
        spec: &BoxSpec,
        files: &V::Files,
        old_token: &BootToken,
    ) -> Result<Booted, RuntimeError> {
        let mut clock = PhaseClock::start();
        let plan = self.vmm.plan(spec, files).await?;
        clock.lap("plan");
        let launched = self.vmm.load(spec, files, plan).await?;
        clock.lap("load");
        let client = super::snapshot::hand_over(
            &spec.id,
            &files.vsock_socket(),
            old_token,
            &spec.boot_token,
            self.vmm.boot_deadline(),
        )
        .await?;
        clock.lap("hand_over");
        self.vmm.kept(files).discard()?;
        tracing::info!(box_id = %spec.id, backend = V::NAME, restore_ms = clock.total_ms(), "VM restored");
        Ok(Booted {
            client,
            egress: launched.egress,
            phases: BootPhases(clock.phases),
        })
    }

    /// The box's VMM when the box is `expected` (running, or paused), else `WrongState`.
    async fn vmm_in(
        &self,
        id: &BoxId,
        files: &V::Files,
        operation: &'static str,
        expected: RuntimeStatus,
    ) -> Result<VmProcess, RuntimeError> {
        let status = self.state(id).await?;
        let wanted = match expected {
            RuntimeStatus::Running => "running",
            RuntimeStatus::Paused => "paused",
            RuntimeStatus::Stopped => "stopped",
        };
        self.find(files)
            .filter(|_| status == expected)
            .ok_or_else(|| wrong_state(id, operation, wanted, status))
    }

    /// Ends a VMM whose guest berth ended (a stop, a snapshot), reaps it and cleans up.
    async fn end(&self, id: &BoxId, files: &V::Files, vmm: &VmProcess) -> Result<(), RuntimeError> {
        if !vmm.has_exited() {
            self.vmm.kill(files, vmm).await?;
        }
        // Reaped here, not only by the supervising task: that task dies with its runtime.
        vmm.reap_into(&files.vm().vmm_exit());
        self.clean(id, files).await
    }
}

#[async_trait]
impl<V: Vmm> Runtime for VmRuntime<V> {
    fn name(&self) -> &'static str {
        V::NAME
    }

    fn capabilities(&self) -> Capabilities {
        V::CAPABILITIES
    }

    async fn start(&self, spec: &BoxSpec) -> Result<Booted, RuntimeError> {
        let status = self.state(&spec.id).await?;
        let files = self.files(&spec.id);
        if status == RuntimeStatus::Stopped {
            self.vmm.kept(&files).discard()?;
        }
        let clean = self.clean(&spec.id, &files);
        super::start_or_clean(spec, status, self.boot(spec, &files), clean).await
    }

    async fn rebind_egress(
        &self,
        id: &BoxId,
        id_map: IdMap,
    ) -> Result<EgressListener, RuntimeError> {
        self.vmm.bind_egress(&self.files(id), id_map)
    }

    async fn stop(&self, id: &BoxId, grace: Duration) -> Result<(), RuntimeError> {
        let files = self.files(id);
        let Some(vmm) = self.find(&files) else {
            return self.clean(id, &files).await;
        };
        // However the VMM now ends (even by SIGKILL after the grace), berth ended this boot.
        exit::mark_stop(files.vm());
        self.vmm.power_off(id, &files, &vmm, grace).await;
        self.end(id, &files, &vmm).await
    }

    async fn pause(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let files = self.files(id);
        let vmm = self
            .vmm_in(id, &files, "pause", RuntimeStatus::Running)
            .await?;
        self.vmm.pause(&files, &vmm).await
    }

    async fn resume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let files = self.files(id);
        let vmm = self
            .vmm_in(id, &files, "resume", RuntimeStatus::Paused)
            .await?;
        self.vmm.resume(&files, &vmm).await
    }

    async fn status(&self, id: &BoxId) -> Result<RuntimeStatus, RuntimeError> {
        self.state(id).await
    }

    async fn wait_exit(&self, id: &BoxId) -> Result<BoxExit, RuntimeError> {
        let files = self.files(id);
        let vm = files.vm();
        let classify = || exit::classify(vm, V::PROGRAM, &self.vmm.vmm_log(&files));
        let Some(vmm) = self.find(&files) else {
            exit::settle_gone(&files.vmm_pid(), vm).await;
            return Ok(classify());
        };
        let ours = vmm.is_child();
        let logs = self.vmm.logs(&files);
        let logs: Vec<&std::path::Path> = logs.iter().map(|p| p.as_path()).collect();
        let seen = tokio::select! {
            () = vmm.wait_gone() => {
                exit::settle(&vmm, ours, vm).await;
                None
            }
            () = super::log_ring::keep_bounded(&logs) => None,
            seen = self.vmm.watch_end(&files) => Some(seen),
        };
        if let Some(SeenEnd::HostDiskFull(reason)) = seen {
            tracing::warn!(box_id = %id, %reason, "the VM stopped on a full host disk; ending it");
            // Recorded for later callers if the full disk lets us; this one is told either way.
            if let Err(e) = exit::mark_disk_full(vm, &reason) {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot record the full disk");
            }
            vmm.signal(libc::SIGKILL);
            if !vmm.wait_exit(KILL_WAIT).await {
                return Err(super::still_alive(&files.vmm_pid(), vmm.pid(), KILL_WAIT));
            }
            exit::settle(&vmm, ours, vm).await;
            return Ok(BoxExit::Crashed(reason));
        }
        Ok(classify())
    }

    fn channel(&self, id: &BoxId, token: &BootToken) -> GuestClient {
        hybrid_client(self.files(id).vsock_socket(), token)
    }

    async fn snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let status = self.state(id).await?;
        let files = self.files(id);
        let vmm = self
            .find(&files)
            .filter(|_| status != RuntimeStatus::Stopped)
            .ok_or_else(|| wrong_state(id, "snapshot", "running or paused", status))?;
        let started = Instant::now();
        self.vmm.save(id, &files, &vmm, status).await?;
        // Berth ended this boot: `wait_exit` says clean, not killed.
        exit::mark_stop(files.vm());
        self.end(id, &files, &vmm).await?;
        let bytes = self.vmm.kept(&files).bytes()?;
        tracing::info!(box_id = %id, backend = V::NAME, snapshot_ms = started.elapsed().as_millis() as u64, bytes, "VM snapshotted");
        Ok(())
    }

    async fn restore(&self, spec: &BoxSpec, old_token: &BootToken) -> Result<Booted, RuntimeError> {
        let status = self.state(&spec.id).await?;
        let files = self.files(&spec.id);
        super::snapshot::restore_kept(
            spec,
            status,
            &self.vmm.kept(&files),
            self.load(spec, &files, old_token),
            self.clean(&spec.id, &files),
        )
        .await
    }

    async fn snapshot_size(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        self.vmm.kept(&self.files(id)).bytes()
    }

    async fn discard_snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.vmm.kept(&self.files(id)).discard()
    }

    async fn memory_held(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        match self.find(&self.files(id)) {
            Some(vmm) => self.vmm.memory_held(id, &vmm).await,
            None => Ok(None),
        }
    }

    async fn list(&self) -> Result<Vec<BoxId>, RuntimeError> {
        Ok(self
            .box_dirs()?
            .into_iter()
            .filter(|(_, files)| {
                files
                    .pid_files()
                    .iter()
                    .any(|pid_file| process::find(pid_file, &files.vm().vm_dir()).is_some())
            })
            .map(|(id, _)| id)
            .collect())
    }

    async fn remove(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.stop(id, REMOVE_GRACE).await?;
        crate::fs::remove_dir_all_if_exists(
            self.files(id).vm().box_dir(),
            "remove the box directory",
        )
    }
}
