//! Stopping a QEMU VM: the guest powers itself off (berth-init stops every process, syncs
//! the volume and powers off; QEMU exits), else QMP `quit` after the grace, else SIGKILL.
//! The VM runtime then kills the channel bridge and removes the boot's sockets and files.

use std::time::{Duration, Instant};

use berth_protocol::BoxId;

use super::qmp::{Qmp, QMP_TIMEOUT};
use super::Qemu;
use crate::process::vmm::VmProcess;
use crate::vm::runtime::KILL_WAIT;
use crate::vm::{config_disk, hybrid_client, VmPaths};
use crate::{BootToken, RuntimeError};

impl Qemu {
    /// `Vmm::power_off`: the guest's own shutdown call, with the boot's token from its
    /// config disk (host-only, 0600).
    pub(super) async fn power_off(
        &self,
        id: &BoxId,
        paths: &VmPaths,
        qemu: &VmProcess,
        grace: Duration,
    ) {
        let started = Instant::now();
        // A paused guest cannot shut down: let it run again first.
        if qemu.is_stopped() {
            qemu.signal(libc::SIGCONT);
        }
        match config_disk::read(&paths.config_disk()).map(|c| BootToken::from_hex(&c.token)) {
            Ok(Some(token)) => {
                let client = hybrid_client(paths.vsock_socket(), &token);
                match tokio::time::timeout(grace, client.shutdown()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(box_id = %id, error = %crate::error_chain(&e), "guest shutdown call failed")
                    }
                    Err(_) => tracing::debug!(box_id = %id, "guest shutdown call timed out"),
                }
            }
            Ok(None) => {
                tracing::warn!(box_id = %id, "the config disk's token is not berth's; skipping the guest shutdown")
            }
            Err(e) => {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "no config disk; skipping the guest shutdown")
            }
        }
        if !qemu
            .wait_exit(grace.saturating_sub(started.elapsed()))
            .await
        {
            tracing::info!(box_id = %id, grace_ms = grace.as_millis() as u64, "guest did not power off; quitting QEMU");
        }
    }

    /// `Vmm::kill`: QMP `quit` (QEMU ends at once, the guest as it is), else SIGKILL.
    pub(super) async fn kill(paths: &VmPaths, qemu: &VmProcess) -> Result<(), RuntimeError> {
        let quit = async { Qmp::connect(&paths.qmp_socket()).await?.quit().await };
        if let Err(e) = tokio::time::timeout(QMP_TIMEOUT, quit)
            .await
            .unwrap_or(Ok(()))
        {
            tracing::debug!(error = %crate::error_chain(&e), "QMP quit failed; killing");
        }
        if !qemu.wait_exit(KILL_WAIT).await && !qemu.kill(KILL_WAIT).await {
            return Err(crate::vm::still_alive(
                &paths.qemu_pid(),
                qemu.pid(),
                KILL_WAIT,
            ));
        }
        Ok(())
    }
}
