//! Stopping a Firecracker VM: `SendCtrlAltDel` (berth-init turns it into a graceful stop:
//! every process stopped, the volume synced, power off), waiting for the guest to power off
//! or Firecracker to exit within the grace; the VM runtime then SIGKILLs it and removes the
//! boot's files.
//!
//! A Firecracker guest that powers off without ACPI only halts, and Firecracker keeps
//! running; so the end of the guest is seen on its console ("reboot: Power down", which
//! the kernel prints after berth-init has synced) as well as in Firecracker's exit.

use std::time::{Duration, Instant};

use berth_protocol::BoxId;

use super::api::{ActionType, ApiRequest, InstanceState, VmStateRequest};
use super::client::ApiClient;
use super::paths::FcPaths;
use super::Firecracker;
use crate::process::vmm::VmProcess;
use crate::vm::VmPaths;

/// What the guest kernel prints once it powers off or resets.
const GUEST_GONE_MARKS: [&str; 2] = ["reboot: Power down", "reboot: Restarting system"];
const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_millis(100);
/// How often `guest_halted` reads the console.
const CONSOLE_POLL: Duration = Duration::from_millis(500);

impl Firecracker {
    /// `Vmm::power_off`: `SendCtrlAltDel`, then the wait for Firecracker's exit or the
    /// guest's power-off on the console, at most `grace`.
    pub(super) async fn power_off(
        &self,
        id: &BoxId,
        paths: &FcPaths,
        vmm: &VmProcess,
        grace: Duration,
    ) {
        let started = Instant::now();
        let api = ApiClient::new(&paths.api_socket());
        let console = paths.vm().console_log();
        let console_start = std::fs::metadata(&console).map_or(0, |m| m.len());
        // A paused guest cannot shut down: let it run again first.
        if let Ok(info) = api.instance_info().await {
            if info.state == InstanceState::Paused {
                if let Err(e) = api
                    .call(&ApiRequest::vm_state(VmStateRequest::Resumed))
                    .await
                {
                    tracing::debug!(box_id = %id, error = %crate::error_chain(&e), "resume before stop failed");
                }
            }
        }
        match api
            .call(&ApiRequest::action(ActionType::SendCtrlAltDel))
            .await
        {
            Ok(_) => {
                let mut backoff = FIRST_BACKOFF;
                while started.elapsed() < grace {
                    if vmm.wait_exit(backoff).await || guest_gone(&console, console_start) {
                        break;
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
            Err(e) => {
                tracing::debug!(box_id = %id, error = %crate::error_chain(&e), "SendCtrlAltDel failed; killing")
            }
        }
    }
}

/// Resolves once this boot's console says the guest powered off or reset (polled).
pub(super) async fn guest_halted(vm: &VmPaths) {
    let console = vm.console_log();
    let console_start = std::fs::read_to_string(vm.console_start())
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    while !guest_gone(&console, console_start) {
        tokio::time::sleep(CONSOLE_POLL).await;
    }
}

/// Whether the console, past `from` bytes, says the guest kernel powered off or reset.
fn guest_gone(console: &std::path::Path, from: u64) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(console) else {
        return false;
    };
    if file.seek(SeekFrom::Start(from)).is_err() {
        return false;
    }
    let mut text = Vec::new();
    // Bounded: a chatty console must not make each check read megabytes.
    let _ = file.take(1 << 20).read_to_end(&mut text);
    let text = String::from_utf8_lossy(&text);
    GUEST_GONE_MARKS.iter().any(|mark| text.contains(mark))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_power_off_mark_counts_only_after_the_stop_began() {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("console.log");
        std::fs::write(&console, "[ 1.0] reboot: Power down\n").unwrap();
        let from = std::fs::metadata(&console).unwrap().len();
        assert!(guest_gone(&console, 0));
        assert!(!guest_gone(&console, from));
        std::fs::write(
            &console,
            "[ 1.0] reboot: Power down\nberth-init: stopping\n[ 9.0] reboot: Power down\n",
        )
        .unwrap();
        assert!(guest_gone(&console, from));
        assert!(!guest_gone(&dir.path().join("none"), 0));
    }
}
