//! Stopping the box: SIGTERM every process, wait up to [`GRACE`], SIGKILL the rest, sync.
//!
//! As PID 1 of the box's pid namespace, `kill(-1)` reaches every process but PID 1. Run
//! outside a container (tests, `--run-dir`), `kill(-1)` would reach the whole host, so only
//! the process groups this agent started are signalled.

use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;

use crate::reaper::Reaper;

const GRACE: Duration = Duration::from_secs(2);

pub async fn stop_everything(reaper: &Reaper) {
    let pid1 = std::process::id() == 1;
    let signal_all = |sig: Option<Signal>| -> bool {
        let groups_left = reaper.signal_groups(sig) > 0;
        if pid1 {
            !matches!(kill(Pid::from_raw(-1), sig), Err(Errno::ESRCH))
        } else {
            groups_left
        }
    };
    let deadline = Instant::now() + GRACE;
    let mut alive = signal_all(Some(Signal::SIGTERM));
    while alive && Instant::now() < deadline {
        // The reaper task collects the exits meanwhile.
        tokio::time::sleep(Duration::from_millis(20)).await;
        reaper.reap_all();
        alive = signal_all(None);
    }
    if alive {
        signal_all(Some(Signal::SIGKILL));
        tokio::time::sleep(Duration::from_millis(20)).await;
        reaper.reap_all();
    }
    nix::unistd::sync();
}
