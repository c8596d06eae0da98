//! Stopping a running box: SIGTERM to berth-init, SIGKILL to everything after the grace.

use std::time::Duration;

use berth_protocol::BoxId;

use super::SandboxRuntime;
use crate::{process, RuntimeError};

/// How long `stop` waits for the init to die after SIGKILL before giving up on it.
const KILL_WAIT: Duration = Duration::from_secs(5);

impl SandboxRuntime {
    /// SIGTERM to berth-init, SIGKILL to every process after `grace`.
    pub(super) async fn terminate(
        &self,
        id: &BoxId,
        pid: i32,
        grace: Duration,
    ) -> Result<(), RuntimeError> {
        if let Err(e) = self.oci.kill(id.as_str(), "TERM", false).await {
            tracing::debug!(box_id = %id, error = %e, "SIGTERM failed; killing");
        }
        if process::wait_exit(pid, grace).await {
            return Ok(());
        }
        tracing::info!(box_id = %id, grace_ms = grace.as_millis() as u64, "box ignored SIGTERM; killing");
        let _ = self.oci.kill(id.as_str(), "KILL", true).await;
        if process::wait_exit(pid, KILL_WAIT).await {
            Ok(())
        } else {
            Err(RuntimeError::Backend {
                program: self.oci.program().display().to_string(),
                operation: "kill",
                status: format!(
                    "pid {pid} still alive {} ms after SIGKILL",
                    KILL_WAIT.as_millis()
                ),
                stderr: String::new(),
            })
        }
    }
}
