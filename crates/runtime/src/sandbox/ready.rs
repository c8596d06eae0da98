//! Waiting on a box: for its agent to answer after start, for its init to exit after a
//! signal. Both poll with a short backoff or wait on a pidfd; neither sleeps a fixed time.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;

use crate::{error_chain, GuestClient, RuntimeError};

pub const READY_DEADLINE: Duration = Duration::from_secs(10);
const FIRST_BACKOFF: Duration = Duration::from_millis(1);
const MAX_BACKOFF: Duration = Duration::from_millis(20);
/// How much of the console log an error shows.
const TAIL_LINES: usize = 20;

/// Calls `info` until it answers, the init process dies, or the deadline passes.
pub async fn wait_ready(
    id: &str,
    client: &GuestClient,
    init_pid: i32,
    console: &Path,
) -> Result<(), RuntimeError> {
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    loop {
        let last = match client.info().await {
            Ok(_) => return Ok(()),
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
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Waits until process `pid` has exited, at most `timeout`. `true` when it is gone.
pub async fn wait_exit(pid: i32, timeout: Duration) -> bool {
    if pid <= 0 || !pid_alive(pid) {
        return true;
    }
    match pidfd_open(pid) {
        // SAFETY: `fd` is an open pidfd that the AsyncFd owns (and closes) for its whole life.
        Some(fd) => match unsafe {
            AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        } {
            // A pidfd turns readable when its process exits.
            Ok(fd) => tokio::time::timeout(timeout, fd.readable()).await.is_ok() || !pid_alive(pid),
            Err(_) => poll_exit(pid, timeout).await,
        },
        None => poll_exit(pid, timeout).await,
    }
}

async fn poll_exit(pid: i32, timeout: Duration) -> bool {
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    while pid_alive(pid) {
        if started.elapsed() >= timeout {
            return false;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    true
}

/// Whether `pid` names a live (not zombie) process.
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the last ')' of the command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X'])),
        Err(_) => false,
    }
}

/// Reaps box init `pid` once it exits. berth is the child subreaper of its boxes (see
/// `SandboxRuntime::new`): a box's init becomes berth's child when the detached OCI runtime
/// exits, and without this it would stay a zombie. Waits on a pidfd opened now, so it can
/// only ever reap that very process, never another child that later reuses the pid (such
/// as one of tokio's).
pub fn reap_on_exit(pid: i32) {
    let Some(fd) = pidfd_open(pid) else { return };
    // SAFETY: `fd` is an open pidfd that the AsyncFd owns (and closes) for its whole life.
    let Ok(fd) = (unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) })
    else {
        return;
    };
    tokio::spawn(async move {
        if fd.readable().await.is_ok() {
            reap_pidfd(fd.get_ref());
        }
    });
}

/// Collects the exit status of the (exited) process behind `pidfd` if it is our child.
/// Not our child (berth is not its subreaper): ECHILD, and the host's init reaps it.
fn reap_pidfd(pidfd: &OwnedFd) {
    use std::os::fd::AsRawFd;
    // SAFETY: waitid with P_PIDFD reads only the fd and writes the zeroed siginfo we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG,
        );
    }
}

fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The last lines of the console log, for errors a user reads.
pub fn console_tail(console: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(console) else {
        return "(no console log)".into();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(8192)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_exit_sees_a_child_exit_without_fixed_sleeps() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.05")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert!(pid_alive(pid));
        let reaper = std::thread::spawn(move || child.wait());
        assert!(wait_exit(pid, Duration::from_secs(5)).await);
        reaper.join().unwrap().unwrap();
        assert!(!pid_alive(pid));
    }

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
