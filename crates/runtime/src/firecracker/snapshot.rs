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
//!
//! A save that fails after the guest was paused for it, keeping the files included,
//! resumes the guest (a box that stays `running` never sits paused); when the guest cannot
//! be resumed, that is the error.

use std::path::{Path, PathBuf};

use berth_protocol::BoxId;

use super::api::{
    ApiRequest, MemBackend, MemBackendType, SnapshotCreate, SnapshotLoad, SnapshotType,
    VmStateRequest,
};
use super::boot::Plan;
use super::client::ApiClient;
use super::paths::FcPaths;
use super::{api_failed, Firecracker};
use crate::error::io;
use crate::vm::snapshot::KeptSnapshot;
use crate::vm::vmm::Launched;
use crate::{BoxSpec, RuntimeError, RuntimeStatus};

const STATE: &str = "state";
const MEMORY: &str = "memory";
/// The files of a whole snapshot.
pub(super) const FILES: &[&str] = &[STATE, MEMORY];

/// The snapshot's files, where they are kept and where Firecracker sees them.
struct Files {
    kept: KeptSnapshot,
    /// (kept, Firecracker's) for the state and the memory file.
    state: (PathBuf, PathBuf),
    memory: (PathBuf, PathBuf),
}

impl Files {
    fn of(paths: &FcPaths) -> Files {
        let kept = KeptSnapshot::of(paths.vm(), FILES);
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

    /// Moves what Firecracker wrote into the kept snapshot.
    fn keep(&self) -> Result<(), RuntimeError> {
        self.kept.renew()?;
        for (kept, vmm) in self.pairs() {
            std::fs::rename(vmm, kept).map_err(io("keep the snapshot file", vmm))?;
        }
        Ok(())
    }
}

fn api_path(path: &Path) -> String {
    path.display().to_string()
}

impl Firecracker {
    /// `Vmm::save`: the running guest paused, `PUT /snapshot/create`, the files kept. On a
    /// failure nothing is kept and a guest paused for the save is resumed.
    pub(super) async fn save(
        &self,
        id: &BoxId,
        paths: &FcPaths,
        status: RuntimeStatus,
    ) -> Result<(), RuntimeError> {
        let console = paths.vm().console_log();
        let files = Files::of(paths);
        let api = ApiClient::new(&paths.api_socket());
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
        let saved = match api.call(&ApiRequest::snapshot_create(&create)).await {
            Ok(_) => files.keep(),
            Err(e) => Err(api_failed("snapshot", &e, &console)),
        };
        let Err(error) = saved else {
            return Ok(());
        };
        // Nothing was kept: the box goes on as it was.
        for cleanup in [files.remove_vmm_side(), files.kept.discard()] {
            if let Err(e) = cleanup {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot remove a failed snapshot");
            }
        }
        if status == RuntimeStatus::Running {
            if let Err(e) = api
                .call(&ApiRequest::vm_state(VmStateRequest::Resumed))
                .await
            {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&error), "snapshot failed");
                return Err(api_failed("resume after a failed snapshot", &e, &console));
            }
        }
        Err(error)
    }

    /// `Vmm::load`: a fresh Firecracker, launched as a boot would be, `PUT /snapshot/load`s
    /// the kept snapshot instead of configuring a VM.
    pub(super) async fn load(
        &self,
        spec: &BoxSpec,
        paths: &FcPaths,
        plan: Plan,
    ) -> Result<Launched, RuntimeError> {
        let (launched, api, _) = self.spawn(spec, paths, plan).await?;
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
        let loaded = api.call(&ApiRequest::snapshot_load(&load)).await;
        // Firecracker holds what it needs open (the memory is mapped).
        files.remove_vmm_side()?;
        loaded.map_err(|e| api_failed("restore", &e, &console))?;
        Ok(launched)
    }
}
