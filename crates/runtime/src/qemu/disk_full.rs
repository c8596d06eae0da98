//! A full host disk under a running VM. The box's volume is a sparse image: a guest write
//! can need a host block that the host no longer has. The drives stop the VM on ENOSPC
//! (`werror=enospc` in `cmdline.rs`) instead of handing the guest an I/O error that ext4
//! would swallow by going read-only; this watches QEMU's second QMP socket for that stop,
//! so `wait_exit` can end the boot with a reason the user can act on.

use std::path::Path;
use std::time::Duration;

use super::qmp::{Qmp, QmpError, RunState};
use super::VmPaths;

const FIRST_RETRY: Duration = Duration::from_millis(100);
/// A paused (SIGSTOPped) QEMU never greets: retried at this pace until it runs again.
const MAX_RETRY: Duration = Duration::from_secs(2);

/// Resolves once the VM has stopped on a full host disk. Runs as long as it is polled
/// (reconnecting after any QMP error); cancel-safe.
pub(super) async fn stopped_on_enospc(paths: &VmPaths) {
    let socket = paths.qmp_events_socket();
    let mut retry = FIRST_RETRY;
    loop {
        match watch(&socket).await {
            Ok(()) => return,
            Err(e) => {
                tracing::debug!(socket = %socket.display(), error = %crate::error_chain(&e), "QMP event watch broke; reconnecting")
            }
        }
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(MAX_RETRY);
    }
}

/// One connection: `Ok` when the VM stopped on ENOSPC (before it, or while connected).
async fn watch(socket: &Path) -> Result<(), QmpError> {
    let mut qmp = Qmp::connect(socket).await?;
    // The event may have come while nobody listened (the daemon restarted).
    if qmp.query_status().await? == RunState::IoError {
        return Ok(());
    }
    loop {
        let event = qmp.next_event().await?;
        if is_enospc_stop(&event.name, &event.data) {
            return Ok(());
        }
    }
}

fn is_enospc_stop(name: &str, data: &serde_json::Value) -> bool {
    name == "BLOCK_IO_ERROR" && data["nospace"] == true && data["action"] == "stop"
}

/// What the user reads: the host's disk is full, how full, what to do.
pub(super) fn reason(paths: &VmPaths) -> String {
    let dir = paths.box_dir();
    let free = match nix::sys::statvfs::statvfs(dir) {
        Ok(st) => format_bytes(st.blocks_available() * st.fragment_size()),
        Err(_) => "unknown space".into(),
    };
    format!(
        "the host's disk is full: the box's volume image could not grow ({free} free on {}); free space, then start the box again",
        dir.display()
    )
}

fn format_bytes(bytes: u64) -> String {
    const MIB: u64 = 1 << 20;
    if bytes >= MIB {
        format!("{:.1} MiB", bytes as f64 / MIB as f64)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_stop_on_no_space_counts() {
        let event = serde_json::json!({"device": "berth-vol", "operation": "write", "action": "stop", "nospace": true, "reason": "No space left on device"});
        assert!(is_enospc_stop("BLOCK_IO_ERROR", &event));
        let reported = serde_json::json!({"action": "report", "nospace": false});
        assert!(!is_enospc_stop("BLOCK_IO_ERROR", &reported));
        assert!(!is_enospc_stop("STOP", &serde_json::Value::Null));
    }

    #[test]
    fn the_reason_says_how_much_is_free_and_where() {
        let dir = tempfile::tempdir().unwrap();
        let text = reason(&VmPaths::at(dir.path()));
        assert!(text.starts_with("the host's disk is full:"), "{text}");
        assert!(
            text.contains(&format!("free on {}", dir.path().display())),
            "{text}"
        );
        assert_eq!(format_bytes(512), "512 bytes");
        assert_eq!(format_bytes(3 << 20), "3.0 MiB");
    }
}
