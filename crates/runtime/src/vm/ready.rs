//! The wait for a booting VM's berth-init to answer on the guest channel.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::qemu::process;
use crate::{error_chain, BoxId, GuestClient, RuntimeError};

const FIRST_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_millis(100);

/// What [`wait_ready`] waits on.
pub(crate) struct ReadyWait<'a> {
    pub id: &'a BoxId,
    pub client: &'a GuestClient,
    /// The VMM: once it exits, waiting longer is pointless.
    pub vmm_pid: i32,
    pub deadline: Duration,
    /// How long one `info` call may take.
    pub attempt: Duration,
    pub console_log: &'a Path,
}

/// Calls `info` until berth-init answers, the VMM exits, or the deadline passes; the error
/// carries `exited()` (what the VMM said on its way out) and the console's last lines.
pub(crate) async fn wait_ready(
    wait: ReadyWait<'_>,
    exited: impl FnOnce() -> String,
) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let attempt = wait
            .attempt
            .min(wait.deadline.saturating_sub(started.elapsed()));
        let last = match tokio::time::timeout(attempt, wait.client.info()).await {
            Ok(Ok(_)) => return Ok(()),
            // A version mismatch will not fix itself.
            Ok(Err(e @ crate::GuestError::Version { .. })) => return Err(e.into()),
            Ok(Err(e)) => error_chain(&e),
            Err(_) => format!("no answer within {} ms", attempt.as_millis()),
        };
        let gone = !crate::process::pid_alive(wait.vmm_pid);
        if gone || started.elapsed() >= wait.deadline {
            let why = if gone {
                exited()
            } else {
                format!("the {} ms boot deadline passed", wait.deadline.as_millis())
            };
            return Err(RuntimeError::NotReady {
                id: wait.id.to_string(),
                waited_ms: started.elapsed().as_millis() as u64,
                last_error: Some(format!(
                    "{why}; the guest channel: {last}; console log ({}):\n{}",
                    wait.console_log.display(),
                    process::console_tail(wait.console_log)
                )),
            });
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
