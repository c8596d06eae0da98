//! Stopping a VM: the guest powers itself off (berth-init stops every process, syncs the
//! volume and powers off; QEMU exits), else QMP `quit` after the grace, else SIGKILL.
//! Then the channel bridge is killed and the boot's sockets and files are removed.

use std::time::{Duration, Instant};

use berth_protocol::BoxId;

use super::qmp::{Qmp, QMP_TIMEOUT};
use super::QemuRuntime;
use crate::process::vmm as process;
use crate::vm::config_disk;
use crate::{BootToken, Runtime, RuntimeError};

/// How long `stop` waits for a process to die after `quit` or SIGKILL.
pub(super) const KILL_WAIT: Duration = Duration::from_secs(5);

impl QemuRuntime {
    pub(super) async fn shut_down(&self, id: &BoxId, grace: Duration) -> Result<(), RuntimeError> {
        let paths = self.layout.box_paths(id);
        let Some(qemu) = process::find(&paths.qemu_pid(), &paths.vm_dir()) else {
            return self.clean(id, &paths).await;
        };
        // However QEMU now ends (even by SIGKILL after the grace), berth ended this boot.
        crate::vm::exit::mark_stop(&paths);
        let started = Instant::now();
        // A paused guest cannot shut down: let it run again first.
        if qemu.is_stopped() {
            qemu.signal(libc::SIGCONT);
        }
        let qmp_path = paths.qmp_socket();
        // The token of this boot is on its config disk (host-only, 0600).
        match config_disk::read(&paths.config_disk()).map(|c| BootToken::from_hex(&c.token)) {
            Ok(Some(token)) => {
                let client = self.channel(id, &token);
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
            let quit = async { Qmp::connect(&qmp_path).await?.quit().await };
            if let Err(e) = tokio::time::timeout(QMP_TIMEOUT, quit)
                .await
                .unwrap_or(Ok(()))
            {
                tracing::debug!(box_id = %id, error = %crate::error_chain(&e), "QMP quit failed; killing");
            }
            if !qemu.wait_exit(KILL_WAIT).await && !qemu.kill(KILL_WAIT).await {
                return Err(super::still_alive(&paths.qemu_pid(), qemu.pid()));
            }
        }
        // Reaped here, not only by the supervising task: that task dies with its runtime.
        qemu.reap_into(&paths.vmm_exit());
        self.clean(id, &paths).await
    }
}

impl QemuRuntime {
    /// Kills every VM process under this backend's data dir and removes their boot files,
    /// synchronously (for Drop guards and emergency shutdown). Returns the boxes whose
    /// processes would not die.
    pub fn kill_all_blocking(&self) -> Vec<BoxId> {
        let Ok(boxes) = self.box_dirs() else {
            return Vec::new();
        };
        let mut left = Vec::new();
        for (id, paths) in boxes {
            let mut dead = true;
            for pid_file in [paths.qemu_pid(), paths.bridge_pid()] {
                if let Some(process) = process::find(&pid_file, &paths.vm_dir()) {
                    dead &= process.kill_blocking(KILL_WAIT);
                }
            }
            if !dead {
                left.push(id);
                continue;
            }
            for pid_file in [paths.qemu_pid(), paths.bridge_pid()] {
                process::reap_exited(&pid_file);
            }
            for file in paths.boot_files() {
                let _ = std::fs::remove_file(file);
            }
            if let Err(e) = crate::vm::cgroup::VmCgroup::of(&id)
                .remove()
                .and_then(|()| super::take_back(&paths))
            {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot undo a VM's confinement");
            }
        }
        left
    }
}
