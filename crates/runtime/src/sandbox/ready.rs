//! Waiting on a box for its agent to answer after start: polls with a short backoff, never
//! sleeps a fixed time (waiting for its init to exit is `crate::process::wait_exit`).

use std::path::Path;
use std::time::{Duration, Instant};

use berth_protocol::guest::Info;

use crate::process::{self, pid_alive};
use crate::{error_chain, GuestClient, RuntimeError};

pub const READY_DEADLINE: Duration = Duration::from_secs(10);
/// berth-init answers 1–3 ms after `runc run -d` returns: polled every millisecond that
/// long (a refused connect costs microseconds), a doubling backoff would overshoot by up to
/// its last step (4–8 ms). A box that is slower than [`FAST_POLL`] backs off.
const POLL: Duration = Duration::from_millis(1);
const FAST_POLL: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_millis(20);
/// How much of the console log an error shows.
const TAIL_LINES: usize = 20;

/// Calls `info` until it answers (its answer: berth-init's boot phases are in it), the init
/// process dies, or the deadline passes.
pub async fn wait_ready(
    id: &str,
    client: &GuestClient,
    init_pid: i32,
    console: &Path,
) -> Result<Info, RuntimeError> {
    let started = Instant::now();
    let mut backoff = POLL;
    loop {
        let last = match client.info().await {
            Ok(info) => return Ok(info),
            // A version mismatch will not fix itself.
            Err(e @ crate::GuestError::Version { .. }) => return Err(e.into()),
            Err(e) => e,
        };
        // Without a pid (the runtime wrote none) only the deadline ends the wait.
        let dead = init_pid > 0 && !pid_alive(init_pid);
        if dead || started.elapsed() >= READY_DEADLINE {
            let why = if dead {
                "berth-init exited"
            } else {
                "timed out"
            };
            return Err(RuntimeError::NotReady {
                id: id.to_owned(),
                waited_ms: started.elapsed().as_millis() as u64,
                last_error: Some(format!(
                    "{why}; last error: {}; console log ({}):\n{}",
                    error_chain(&last),
                    console.display(),
                    console_tail(console)
                )),
            });
        }
        tokio::time::sleep(backoff).await;
        if started.elapsed() >= FAST_POLL {
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
}

/// The last lines of the console log, for errors a user reads.
pub fn console_tail(console: &Path) -> String {
    process::log_tail(console, 8192, TAIL_LINES).unwrap_or_else(|| "(no console log)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn console_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("console.log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, text).unwrap();
        let tail = console_tail(&log);
        assert!(tail.ends_with("line 99") && !tail.contains("line 79\n"));
    }
}
