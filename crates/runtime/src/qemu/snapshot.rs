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
//! A snapshot loads only into the same QEMU with the same argv (memory, vCPUs, disks and
//! their images): `launch.json` is compared before anything starts, and a box whose
//! template or limits changed since boots cold instead.

use std::ffi::OsString;
use std::time::{Duration, Instant};

use berth_protocol::BoxId;
use serde::{Deserialize, Serialize};

use super::migration::{self, MigrationError};
use super::qmp::{Qmp, QMP_TIMEOUT};
use super::{stop, QemuRuntime};
use crate::error::{io, wrong_state};
use crate::process::vmm as process;
use crate::vm::snapshot::{hand_over, restore_kept, KeptSnapshot};
use crate::vm::VmPaths;
use crate::{BootToken, Booted, BoxSpec, Runtime, RuntimeError, RuntimeStatus};

const STATE: &str = "state";
const LAUNCH: &str = "launch.json";
/// A save or load passes once over the guest's RAM: a floor, plus time per MiB that a
/// loaded TCG host still meets.
const MIGRATION_FLOOR: Duration = Duration::from_secs(30);
const MIGRATION_PER_MIB: Duration = Duration::from_millis(100);
/// Room in a snapshot beyond the guest's RAM: the stream's page headers (8 bytes per 4 KiB
/// page) and the devices' and vCPUs' state, a few hundred KiB.
const DEVICE_STATE_MIB: u64 = 64;

/// What a snapshot loads into: the QEMU that saved it, launched with the same argv.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LaunchRecord {
    /// QMP's `query-version`.
    qemu: serde_json::Value,
    /// The argv, without the kernel command line (it only mattered at boot, and it carries
    /// the host's measured TSC rate, which may differ between daemon runs) and without a
    /// restored QEMU's `-incoming`.
    args: Vec<String>,
}

fn comparable_args(args: impl IntoIterator<Item = OsString>) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.into_iter().map(|a| a.to_string_lossy().into_owned());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-append" => {
                args.next();
                out.extend([arg, "<kernel command line>".into()]);
            }
            // A restored QEMU's own: not part of what the guest saw.
            "-incoming" => {
                args.next();
            }
            _ => out.push(arg),
        }
    }
    out
}

fn kept(paths: &VmPaths) -> KeptSnapshot {
    KeptSnapshot::of(paths, &[STATE, LAUNCH])
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

impl QemuRuntime {
    pub(super) async fn take_snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let status = self.state(id).await?;
        if status == RuntimeStatus::Stopped {
            return Err(wrong_state(id, "snapshot", "running or paused", status));
        }
        let paths = self.layout.box_paths(id);
        let qemu = process::find(&paths.qemu_pid(), &paths.vm_dir()).ok_or_else(|| {
            wrong_state(id, "snapshot", "running or paused", RuntimeStatus::Stopped)
        })?;
        let started = Instant::now();
        let args = qemu
            .args()
            .map_err(io("read QEMU's command line", &paths.qemu_pid()))?;
        let args = comparable_args(args);
        let memory_mib = memory_mib(&args);
        let owner = owner_of(&paths.run_dir())?;
        let snapshot = kept(&paths);
        snapshot.renew()?;
        let state = snapshot.file(STATE);
        let socket = paths.migration_socket();
        crate::fs::remove_if_exists(&socket)?;
        // A paused box's processes are SIGSTOPped (`pause`): QMP needs QEMU running. Its
        // vCPUs are halted through QMP at once; they run for that moment only.
        if status == RuntimeStatus::Paused {
            self.resume(id).await?;
        }
        let mut qmp = Qmp::connect(&paths.qmp_socket())
            .await
            .map_err(|e| failed("snapshot", e, &paths))?;
        let saved = async {
            qmp.stop().await?;
            let qemu_version = qmp.execute("query-version").await?;
            let deadline = migration_deadline(memory_mib);
            let limit = (memory_mib + DEVICE_STATE_MIB) << 20;
            let bytes = migration::save(&mut qmp, &socket, owner, &state, deadline, limit).await?;
            Ok::<_, MigrationError>((qemu_version, bytes))
        }
        .await;
        let _ = crate::fs::remove_if_exists(&socket);
        let (qemu_version, bytes) = match saved {
            Ok(saved) => saved,
            Err(e) => {
                // Nothing was kept: the box goes on as it was.
                let _ = snapshot.discard();
                let _ = qmp.cont().await;
                if status == RuntimeStatus::Paused {
                    let _ = self.pause(id).await;
                }
                return Err(failed("snapshot", e, &paths));
            }
        };
        let record = LaunchRecord {
            qemu: qemu_version,
            args,
        };
        let record = serde_json::to_vec_pretty(&record).expect("a launch record serialises");
        // Written after the state: a snapshot without its record is no snapshot (`exists`).
        let record_path = snapshot.file(LAUNCH);
        std::fs::write(&record_path, record).map_err(io("write", &record_path))?;

        // Berth ended this boot: `wait_exit` says clean, not killed.
        crate::vm::exit::mark_stop(&paths);
        let _ = tokio::time::timeout(QMP_TIMEOUT, qmp.quit()).await;
        drop(qmp);
        if !qemu.wait_exit(stop::KILL_WAIT).await && !qemu.kill(stop::KILL_WAIT).await {
            return Err(super::still_alive(&paths.qemu_pid(), qemu.pid()));
        }
        qemu.reap_into(&paths.vmm_exit());
        self.clean(id, &paths).await?;
        tracing::info!(box_id = %id, snapshot_ms = started.elapsed().as_millis() as u64, bytes, "QEMU VM snapshotted");
        Ok(())
    }

    pub(super) async fn restore_snapshot(
        &self,
        spec: &BoxSpec,
        old_token: &BootToken,
    ) -> Result<Booted, RuntimeError> {
        let status = self.state(&spec.id).await?;
        let paths = self.layout.box_paths(&spec.id);
        restore_kept(
            spec,
            status,
            &kept(&paths),
            self.load(spec, &paths, old_token),
            self.clean(&spec.id, &paths),
        )
        .await
    }

    async fn load(
        &self,
        spec: &BoxSpec,
        paths: &VmPaths,
        old_token: &BootToken,
    ) -> Result<Booted, RuntimeError> {
        let snapshot = kept(paths);
        let record_path = snapshot.file(LAUNCH);
        let record = std::fs::read(&record_path).map_err(io("read", &record_path))?;
        let record: LaunchRecord = serde_json::from_slice(&record)
            .map_err(|e| changed(format!("{}: {e}", record_path.display())))?;
        let mut plan = self.plan(spec, paths).await?;
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
        process::wait_for_path(&socket, launched.qemu, deadline)
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

        let client = hand_over(
            &spec.id,
            &paths.vsock_socket(),
            old_token,
            &spec.boot_token,
            self.boot_deadline(),
        )
        .await?;
        snapshot.discard()?;
        tracing::info!(box_id = %spec.id, restore_ms = launched.started.elapsed().as_millis() as u64, "QEMU VM restored");
        Ok(Booted {
            client,
            egress: launched.egress,
            phases: crate::BootPhases::default(),
        })
    }

    pub(super) fn snapshot_bytes(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        kept(&self.layout.box_paths(id)).bytes()
    }

    pub(super) fn discard(&self, id: &BoxId) -> Result<(), RuntimeError> {
        kept(&self.layout.box_paths(id)).discard()
    }
}

/// Who the boot's jailed VMM processes run as: the owner of its run dir (`boot::hand_over`).
fn owner_of(run_dir: &std::path::Path) -> Result<(u32, u32), RuntimeError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(run_dir).map_err(io("stat", run_dir))?;
    Ok((meta.uid(), meta.gid()))
}

#[derive(Debug, thiserror::Error)]
#[error("QEMU exited before it listened for the snapshot")]
struct QemuGone;

/// The guest RAM in an argv (`-m <n>M`); 0 when absent.
fn memory_mib(args: &[String]) -> u64 {
    args.windows(2)
        .find(|pair| pair[0] == "-m")
        .and_then(|pair| pair[1].strip_suffix('M')?.parse().ok())
        .unwrap_or(0)
}

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
        assert_eq!(memory_mib(&a), 256);
        let c = comparable_args(["-m", "512M", "-append", "x", "-smp", "1"].map(OsString::from));
        assert_ne!(a, c);
        assert_eq!(
            first_difference(&a, &c),
            "QEMU would now be launched with \"512M\" where the snapshot has \"256M\""
        );
    }
}
