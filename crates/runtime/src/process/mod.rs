//! Host processes of a box, shared by the backends (a sandbox's init, a VM's QEMU and its
//! channel bridge): whether one lives, waiting for its exit, reaping it, and the tail of
//! its log for errors. `vmm.rs`: starting a VM's VMM processes and finding, signalling and
//! reaping them again.
//!
//! Exits are awaited and children reaped through a pidfd opened while the process is known
//! to be the right one, so a later process that reuses the pid is never waited on or reaped
//! (such as one of tokio's children). Without a pidfd, waiting falls back to polling
//! `/proc` with a short backoff; nothing sleeps a fixed time.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;

pub(crate) mod vmm;

const FIRST_BACKOFF: Duration = Duration::from_millis(1);
const MAX_BACKOFF: Duration = Duration::from_millis(20);

/// Waits until process `pid` has exited, at most `timeout`. `true` when it is gone.
pub(crate) async fn wait_exit(pid: i32, timeout: Duration) -> bool {
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
pub(crate) fn pid_alive(pid: i32) -> bool {
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

/// Reaps child `pid` once it exits. Waits on a pidfd opened now, so it can only ever reap
/// that very process, never another child that later reuses the pid.
pub(crate) fn reap_on_exit(pid: i32) {
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
/// Not our child (a box or VM left by an earlier daemon, or berth is not its subreaper):
/// ECHILD, and the host's init reaps it.
pub(crate) fn reap_pidfd(pidfd: &OwnedFd) {
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

pub(crate) fn pidfd_open(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The last `count` lines of a log, read from at most its last `window` bytes; `None` when
/// it cannot be opened.
pub(crate) fn log_tail(path: &Path, window: u64, count: usize) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(window)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    Some(lines[lines.len().saturating_sub(count)..].join("\n"))
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
    fn log_tail_keeps_the_last_lines_of_the_window() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("console.log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, text).unwrap();
        let tail = log_tail(&log, 8192, 20).unwrap();
        assert!(tail.ends_with("line 99") && !tail.contains("line 79\n"));
        // `line 98\nline 99\n` is the last 16 bytes.
        assert_eq!(log_tail(&log, 16, 20).unwrap(), "line 98\nline 99");
        assert_eq!(log_tail(&dir.path().join("none"), 8192, 20), None);
    }
}
