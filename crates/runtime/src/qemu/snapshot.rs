//! Snapshots of a QEMU box: the stopped VM is migrated into a file (`migration.rs`) and
//! QEMU quits; a restore launches QEMU exactly as a boot would (same disks, same jail, a
//! fresh channel bridge) but with `-incoming`, which loads the file and runs the guest.
//! The new bridge starts its link with a sync and a hello; berth-init in the guest resets
//! the streams of the old one (listeners stay), so the host simply connects again and
//! hands over the new boot token with the old one.
//!
//! ```text
//! <data>/boxes/<id>/snapshot/            (crate::vm::snapshot)
//!     state                              QEMU's migration stream: devices, vCPUs and RAM
//!                                        (an all-zero page is a flag)
//!     launch.json                        the QEMU version and argv it was saved from
//! ```
//!
//! The argv and the guest's RAM come from what the boot recorded at launch
//! (`<vm>/launch.json`, `launch_record.rs`), never from the running QEMU's `/proc` command
//! line, which QEMU itself can rewrite: the RAM bounds how much of its stream is copied.
//!
//! A save that fails at any step after the guest was halted, the record's write included,
//! discards what it wrote and continues the guest (`save_or_continue`): a box that stays
//! `running` never sits halted. When the guest cannot be continued, that is the error.
//!
//! A snapshot loads only into the same QEMU with the same argv (memory, vCPUs, disks and
//! their images): `launch.json` is compared before anything starts, and a box whose
//! template or limits changed since boots cold instead.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_protocol::BoxId;
use serde::{Deserialize, Serialize};

use super::migration::{self, MigrationError};
use super::qmp::{Qmp, QmpError};
use super::Qemu;
use crate::error::io;
use crate::process::vmm::{self as process, VmProcess};
use crate::vm::snapshot::KeptSnapshot;
use crate::vm::vmm::{Launched, Vmm};
use crate::vm::VmPaths;
use crate::{BoxSpec, RuntimeError, RuntimeStatus};

use super::boot::Plan;
use super::launch_record::{comparable_args, LaunchRecord};

const STATE: &str = "state";
const LAUNCH: &str = "launch.json";
/// The files of a whole snapshot.
pub(super) const FILES: &[&str] = &[STATE, LAUNCH];
/// A save or load passes once over the guest's RAM: a floor, plus time per MiB that a
/// loaded TCG host still meets.
const MIGRATION_FLOOR: Duration = Duration::from_secs(30);
const MIGRATION_PER_MIB: Duration = Duration::from_millis(100);
/// Room in a snapshot beyond the guest's RAM: the stream's page headers (8 bytes per 4 KiB
/// page) and the devices' and vCPUs' state, a few hundred KiB.
const DEVICE_STATE_MIB: u64 = 64;

/// What a snapshot loads into: the QEMU that saved it, launched with the same argv.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SavedLaunch {
    /// QMP's `query-version`.
    qemu: serde_json::Value,
    /// The argv, without the kernel command line (it only mattered at boot, and it carries
    /// the host's measured TSC rate, which may differ between daemon runs) and without a
    /// restored QEMU's `-incoming`.
    args: Vec<String>,
}

fn migration_deadline(memory_mib: u64) -> Duration {
    MIGRATION_FLOOR + MIGRATION_PER_MIB * u32::try_from(memory_mib).unwrap_or(u32::MAX)
}

fn failed(operation: &'static str, error: impl std::error::Error, paths: &VmPaths) -> RuntimeError {
    RuntimeError::Backend {
        program: "qemu".into(),
        operation,
        status: crate::error_chain(&error),
        stderr: process::log_tail(&paths.qemu_log()),
    }
}

/// Why a save kept nothing.
#[derive(Debug, thiserror::Error)]
pub(super) enum SaveError {
    #[error(transparent)]
    Migration(#[from] MigrationError),
    #[error("cannot write the snapshot's launch record {path}")]
    Record {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The save failed after the guest was halted, and `cont` failed too: the guest stays
    /// halted.
    #[error("{failed}; then continuing the guest failed, so it stays halted")]
    NotContinued {
        failed: Box<SaveError>,
        #[source]
        cont: QmpError,
    },
}

impl From<QmpError> for SaveError {
    fn from(e: QmpError) -> SaveError {
        SaveError::Migration(MigrationError::Qmp(e))
    }
}

/// Where a save goes: the kept snapshot, the migration socket QEMU connects to (handed to
/// `owner`, QEMU's uid), and what the boot was launched with.
pub(super) struct SaveTo<'a> {
    pub snapshot: &'a KeptSnapshot,
    pub socket: &'a Path,
    pub owner: (u32, u32),
    pub launch: &'a LaunchRecord,
}

/// Halts the guest and saves it into `to.snapshot` (the state, then the record: a snapshot
/// without its record is none). On any failure nothing is kept and the guest is continued;
/// a failed `cont` is [`SaveError::NotContinued`]. Returns the state's bytes.
pub(super) async fn save_or_continue(qmp: &mut Qmp, to: SaveTo<'_>) -> Result<u64, SaveError> {
    let saved = async {
        qmp.stop().await?;
        let qemu = qmp.execute("query-version").await?;
        let memory_mib = to.launch.memory_mib;
        let limit = (memory_mib + DEVICE_STATE_MIB) << 20;
        let state = to.snapshot.file(STATE);
        let deadline = migration_deadline(memory_mib);
        let bytes = migration::save(qmp, to.socket, to.owner, &state, deadline, limit).await?;
        let record = SavedLaunch {
            qemu,
            args: to.launch.args.clone(),
        };
        let record = serde_json::to_vec_pretty(&record).expect("a launch record serialises");
        let path = to.snapshot.file(LAUNCH);
        std::fs::write(&path, record).map_err(|source| SaveError::Record { path, source })?;
        Ok::<_, SaveError>(bytes)
    }
    .await;
    let _ = crate::fs::remove_if_exists(to.socket);
    let failed = match saved {
        Ok(bytes) => return Ok(bytes),
        Err(e) => e,
    };
    if let Err(e) = to.snapshot.discard() {
        tracing::warn!(error = %crate::error_chain(&e), "cannot remove a failed snapshot");
    }
    match qmp.cont().await {
        Ok(()) => Err(failed),
        Err(cont) => Err(SaveError::NotContinued {
            failed: Box::new(failed),
            cont,
        }),
    }
}

impl Qemu {
    /// `Vmm::save`: a paused box (SIGSTOPped) runs again for the moment QMP needs, its
    /// vCPUs halted through QMP at once, and is paused again when the save fails.
    pub(super) async fn save(
        &self,
        id: &BoxId,
        paths: &VmPaths,
        vmm: &VmProcess,
        status: RuntimeStatus,
    ) -> Result<(), RuntimeError> {
        let launch = LaunchRecord::read(paths)?;
        let owner = owner_of(&paths.run_dir())?;
        let snapshot = self.kept(paths);
        snapshot.renew()?;
        let socket = paths.migration_socket();
        crate::fs::remove_if_exists(&socket)?;
        let paused = status == RuntimeStatus::Paused;
        if paused {
            Vmm::resume(self, paths, vmm).await?;
        }
        let saved = async {
            let mut qmp = Qmp::connect(&paths.qmp_socket()).await?;
            let to = SaveTo {
                snapshot: &snapshot,
                socket: &socket,
                owner,
                launch: &launch,
            };
            save_or_continue(&mut qmp, to).await
        }
        .await;
        let error = match saved {
            Ok(bytes) => {
                tracing::debug!(box_id = %id, bytes, "QEMU saved the VM");
                return Ok(());
            }
            Err(e) => failed("snapshot", e, paths),
        };
        // Nothing was kept: the box goes on as it was.
        if paused {
            if let Err(e) = Vmm::pause(self, paths, vmm).await {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&error), "snapshot failed");
                return Err(e);
            }
        }
        Err(error)
    }

    /// `Vmm::load`: QEMU launched as the boot was (compared with the snapshot's record
    /// first) but with `-incoming`, the saved state sent into it, the guest continued.
    pub(super) async fn load(
        &self,
        spec: &BoxSpec,
        paths: &VmPaths,
        mut plan: Plan,
    ) -> Result<Launched, RuntimeError> {
        let snapshot = self.kept(paths);
        let record_path = snapshot.file(LAUNCH);
        let record = std::fs::read(&record_path).map_err(io("read", &record_path))?;
        let record: SavedLaunch = serde_json::from_slice(&record)
            .map_err(|e| changed(format!("{}: {e}", record_path.display())))?;
        let args = comparable_args(plan.args.clone());
        if args != record.args {
            return Err(changed(first_difference(&record.args, &args)));
        }
        let socket = paths.migration_socket();
        crate::fs::remove_if_exists(&socket)?;
        let mut incoming = OsString::from("unix:");
        incoming.push(&socket);
        plan.args.extend([OsString::from("-incoming"), incoming]);
        let launched = self.launch(spec, paths, plan).await?;

        let deadline = migration_deadline(spec.limits.memory_mib);
        process::wait_for_path(&socket, launched.pid, deadline)
            .await
            .map_err(|_| failed("restore", QemuGone, paths))?;
        let mut qmp = Qmp::connect(&paths.qmp_socket())
            .await
            .map_err(|e| failed("restore", e, paths))?;
        let version = qmp
            .execute("query-version")
            .await
            .map_err(|e| failed("restore", e, paths))?;
        if version != record.qemu {
            return Err(changed(format!(
                "QEMU is now {version}, the snapshot was saved by {}",
                record.qemu
            )));
        }
        migration::load(&mut qmp, &socket, &snapshot.file(STATE), deadline)
            .await
            .map_err(|e| failed("restore", e, paths))?;
        drop(qmp);
        crate::fs::remove_if_exists(&socket)?;
        Ok(launched)
    }
}

/// Who the boot's jailed VMM processes run as: the owner of its run dir (`boot::hand_over`).
fn owner_of(run_dir: &Path) -> Result<(u32, u32), RuntimeError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(run_dir).map_err(io("stat", run_dir))?;
    Ok((meta.uid(), meta.gid()))
}

#[derive(Debug, thiserror::Error)]
#[error("QEMU exited before it listened for the snapshot")]
struct QemuGone;

fn first_difference(saved: &[String], now: &[String]) -> String {
    let at = saved
        .iter()
        .zip(now)
        .position(|(a, b)| a != b)
        .unwrap_or(saved.len().min(now.len()));
    format!(
        "QEMU would now be launched with {:?} where the snapshot has {:?}",
        now.get(at).map(String::as_str).unwrap_or("nothing"),
        saved.get(at).map(String::as_str).unwrap_or("nothing"),
    )
}

/// The snapshot was saved by a different QEMU or launch: loading it would fail or, worse,
/// hand the guest different disks under its page cache.
fn changed(what: String) -> RuntimeError {
    RuntimeError::SnapshotMismatch { what }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_command_line_is_left_out_of_the_comparison() {
        let a = comparable_args(
            [
                "-m",
                "256M",
                "-append",
                "tsc_early_khz=1",
                "-smp",
                "1",
                "-incoming",
                "unix:/s",
            ]
            .map(OsString::from),
        );
        let b = comparable_args(
            ["-m", "256M", "-append", "tsc_early_khz=2", "-smp", "1"].map(OsString::from),
        );
        assert_eq!(a, b);
        let c = comparable_args(["-m", "512M", "-append", "x", "-smp", "1"].map(OsString::from));
        assert_ne!(a, c);
        assert_eq!(
            first_difference(&a, &c),
            "QEMU would now be launched with \"512M\" where the snapshot has \"256M\""
        );
    }
}
