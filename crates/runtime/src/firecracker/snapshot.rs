//! Snapshots through Firecracker's own API: `PUT /snapshot/create` of the paused VM, then
//! the VMM ends; a restore launches a fresh Firecracker exactly as a boot would (same
//! drives, same jail, same sockets) and `PUT /snapshot/load`s it instead of configuring
//! a VM. Firecracker resets the guest's vsock connections at load, so the host simply
//! connects again; the old boot token opens that first call, which hands over the new one.
//!
//! Firecracker writes and reads the files in its sockets dir (the one directory a jailed
//! Firecracker may write, at the same path inside its chroot). Between the two they live in
//! the box's kept snapshot dir (`crate::vm::snapshot`):
//!
//! ```text
//! <data>/boxes/<id>/snapshot/
//!     state                              Firecracker's device and vCPU state
//!     memory                             the guest's RAM (sparse where it never wrote)
//! ```

use std::path::{Path, PathBuf};
use std::time::Instant;

use berth_protocol::BoxId;

use super::api::{
    ApiRequest, MemBackend, MemBackendType, SnapshotCreate, SnapshotLoad, SnapshotType,
    VmStateRequest,
};
use super::client::ApiClient;
use super::paths::FcPaths;
use super::{api_failed, stop, FirecrackerRuntime};
use crate::error::{io, wrong_state};
use crate::process::vmm as process;
use crate::vm::snapshot::{hand_over, restore_kept, KeptSnapshot};
use crate::{BootToken, Booted, BoxSpec, RuntimeError, RuntimeStatus};

const STATE: &str = "state";
const MEMORY: &str = "memory";

/// The snapshot's files, where they are kept and where Firecracker sees them.
struct Files {
    kept: KeptSnapshot,
    /// (kept, Firecracker's) for the state and the memory file.
    state: (PathBuf, PathBuf),
    memory: (PathBuf, PathBuf),
}

impl Files {
    fn of(paths: &FcPaths) -> Files {
        let kept = KeptSnapshot::of(paths.vm(), &[STATE, MEMORY]);
        let vmm = |name: &str| paths.sockets_dir().join(format!("snapshot.{name}"));
        Files {
            state: (kept.file(STATE), vmm(STATE)),
            memory: (kept.file(MEMORY), vmm(MEMORY)),
            kept,
        }
    }

    fn pairs(&self) -> [&(PathBuf, PathBuf); 2] {
        [&self.state, &self.memory]
    }

    fn remove_vmm_side(&self) -> Result<(), RuntimeError> {
        for (_, vmm) in self.pairs() {
            crate::fs::remove_if_exists(vmm)?;
        }
        Ok(())
    }
}

fn api_path(path: &Path) -> String {
    path.display().to_string()
}

impl FirecrackerRuntime {
    pub(super) async fn take_snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let status = self.state(id).await?;
        if status == RuntimeStatus::Stopped {
            return Err(wrong_state(id, "snapshot", "running or paused", status));
        }
        let paths = self.box_paths(id);
        let console = paths.vm().console_log();
        let files = Files::of(&paths);
        let api = ApiClient::new(&paths.api_socket());
        let started = Instant::now();
        files.remove_vmm_side()?;
        if status == RuntimeStatus::Running {
            api.call(&ApiRequest::vm_state(VmStateRequest::Paused))
                .await
                .map_err(|e| api_failed("snapshot", &e, &console))?;
        }
        let create = SnapshotCreate {
            snapshot_path: api_path(&files.state.1),
            mem_file_path: api_path(&files.memory.1),
            snapshot_type: SnapshotType::Full,
        };
        if let Err(e) = api.call(&ApiRequest::snapshot_create(&create)).await {
            // Nothing was saved: the box goes on as it was.
            if status == RuntimeStatus::Running {
                let _ = api
                    .call(&ApiRequest::vm_state(VmStateRequest::Resumed))
                    .await;
            }
            let _ = files.remove_vmm_side();
            return Err(api_failed("snapshot", &e, &console));
        }
        files.kept.renew()?;
        for (kept, vmm) in files.pairs() {
            std::fs::rename(vmm, kept).map_err(io("keep the snapshot file", vmm))?;
        }
        // Berth ended this boot: `wait_exit` says clean, not killed.
        crate::vm::exit::mark_stop(paths.vm());
        if let Some(vmm) = process::find(&paths.pid_file(), &paths.vm().vm_dir()) {
            if !vmm.kill(stop::KILL_WAIT).await {
                return Err(crate::vm::still_alive(
                    &paths.pid_file(),
                    vmm.pid(),
                    stop::KILL_WAIT,
                ));
            }
        }
        self.clean(id, &paths).await?;
        tracing::info!(box_id = %id, snapshot_ms = started.elapsed().as_millis() as u64, "Firecracker VM snapshotted");
        Ok(())
    }

    pub(super) async fn restore_snapshot(
        &self,
        spec: &BoxSpec,
        old_token: &BootToken,
    ) -> Result<Booted, RuntimeError> {
        let status = self.state(&spec.id).await?;
        let paths = self.box_paths(&spec.id);
        restore_kept(
            spec,
            status,
            &Files::of(&paths).kept,
            self.load(spec, &paths, old_token),
            self.clean(&spec.id, &paths),
        )
        .await
    }

    async fn load(
        &self,
        spec: &BoxSpec,
        paths: &FcPaths,
        old_token: &BootToken,
    ) -> Result<Booted, RuntimeError> {
        let launched = self.launch(spec, paths).await?;
        let console = paths.vm().console_log();
        let files = Files::of(paths);
        // Linked, not moved: a load that fails leaves the snapshot for another try.
        files.remove_vmm_side()?;
        for (kept, vmm) in files.pairs() {
            std::fs::hard_link(kept, vmm).map_err(io("link the snapshot file", vmm))?;
        }
        let load = SnapshotLoad {
            snapshot_path: api_path(&files.state.1),
            mem_backend: MemBackend {
                backend_path: api_path(&files.memory.1),
                backend_type: MemBackendType::File,
            },
            enable_diff_snapshots: false,
            resume_vm: true,
        };
        let loaded = launched.api.call(&ApiRequest::snapshot_load(&load)).await;
        // Firecracker holds what it needs open (the memory is mapped).
        files.remove_vmm_side()?;
        loaded.map_err(|e| api_failed("restore", &e, &console))?;

        let client = hand_over(
            &spec.id,
            &paths.vsock_socket(),
            old_token,
            &spec.boot_token,
            self.config.boot_deadline,
        )
        .await?;
        files.kept.discard()?;
        tracing::info!(box_id = %spec.id, restore_ms = launched.started.elapsed().as_millis() as u64, "Firecracker VM restored");
        Ok(Booted {
            client,
            egress: launched.egress,
            phases: crate::BootPhases::default(),
        })
    }

    pub(super) fn snapshot_bytes(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        Files::of(&self.box_paths(id)).kept.bytes()
    }

    pub(super) fn discard(&self, id: &BoxId) -> Result<(), RuntimeError> {
        Files::of(&self.box_paths(id)).kept.discard()
    }
}
