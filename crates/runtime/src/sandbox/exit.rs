//! How a sandbox box's boot ended, for `Runtime::wait_exit`: waits on a pidfd of the
//! container's init (no `runc state` polling), then reads small files in the box dir
//! written by whoever saw the end.
//!
//! - `stop-requested`: berth asked this boot to stop, so however the init then ended
//!   (SIGTERM, or SIGKILL after the grace) the boot ended cleanly.
//! - `init.exit`: the init's wait status. berth is the child subreaper, so the init becomes
//!   its child once the detached OCI runtime exits; its reaper ([`reap_recorded_on_exit`])
//!   writes the status. Exit 0 is berth-init's own orderly end (a stop, or the box shut
//!   itself down); another code or a signal is a crash.
//! - An init this daemon did not start (before a restart) is not its child and leaves no
//!   status: berth-init removes its agent socket on its orderly way out, so a socket still
//!   there says it was killed or died. (Box root can remove the socket too: it can only
//!   make its own crash look clean.)
//!
//! Not told apart: *why* a killed init was killed (the OOM killer, a host admin's `kill`):
//! the box's cgroup is gone with it.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use berth_protocol::BoxId;
use tokio::io::unix::AsyncFd;

use super::paths::BoxPaths;
use crate::process::pidfd_open;
use crate::process::vmm::{read_status, reap_recorded, VmmStatus};
use crate::{BoxExit, RuntimeError};

/// How long the init's reaper may take to record its status once it has exited.
const RECORD_WAIT: Duration = Duration::from_secs(2);
const FIRST_BACKOFF: Duration = Duration::from_millis(1);
const MAX_BACKOFF: Duration = Duration::from_millis(50);
/// Console lines a crash reason quotes.
const REASON_LINES: usize = 10;

/// At the start of a boot: forgets how the last one ended.
pub fn begin_boot(paths: &BoxPaths) -> Result<(), RuntimeError> {
    for file in [paths.init_exit(), paths.stop_requested()] {
        crate::fs::remove_if_exists(&file)?;
    }
    Ok(())
}

/// berth is stopping this boot: however the init now ends, the boot ended cleanly.
pub fn mark_stop(paths: &BoxPaths) {
    let file = paths.stop_requested();
    if let Err(e) = std::fs::write(&file, b"") {
        tracing::warn!(path = %file.display(), error = %e, "cannot record a requested stop");
    }
}

/// Reaps the box's init `pid` (berth's child once the OCI runtime has exited) when it
/// exits, and records how it ended. Waits on a pidfd opened now, so it never reaps a
/// later process that reuses the pid.
pub fn reap_recorded_on_exit(pid: i32, paths: &BoxPaths) {
    let Some(fd) = (pid > 0).then(|| pidfd_open(pid)).flatten() else {
        return;
    };
    // SAFETY: `fd` is an open pidfd that the AsyncFd owns (and closes) for its whole life.
    let Ok(fd) = (unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) })
    else {
        return;
    };
    let record = paths.init_exit();
    tokio::spawn(async move {
        if fd.readable().await.is_ok() {
            reap_recorded(fd.get_ref(), &record);
        }
    });
}

/// The box's init, pinned by a pidfd opened before it was checked to be box `id`'s
/// (its cgroup is the box's): a recycled pid is never waited on.
pub struct Init {
    pidfd: OwnedFd,
    ours: bool,
}

impl Init {
    pub fn find(pid: i32, id: &BoxId) -> Option<Init> {
        if pid <= 0 {
            return None;
        }
        let pidfd = pidfd_open(pid)?;
        let box_cgroup = format!("/berth/{}", id.as_str());
        // The box's cgroup or one below it (berth-init may nest its own).
        let in_box_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| {
            c.lines().any(|l| {
                l.split_once(&box_cgroup)
                    .is_some_and(|(_, rest)| rest.is_empty() || rest.starts_with('/'))
            })
        });
        if !in_box_cgroup || !crate::process::pid_alive(pid) {
            return None;
        }
        Some(Init {
            pidfd,
            ours: parent_of(pid) == Some(std::process::id()),
        })
    }

    /// Waits until the init has exited; reaps it and records its status if it is this
    /// daemon's child and its reaper did not yet.
    pub async fn wait(self, paths: &BoxPaths) -> Result<(), RuntimeError> {
        // SAFETY: the pidfd is open and the AsyncFd owns it from here on.
        let fd =
            unsafe { AsyncFd::register_with_interest(self.pidfd, tokio::io::Interest::READABLE) }
                .map_err(|e| crate::error::io("watch the init of", paths.dir())(e.into()))?;
        // A pidfd turns readable when its process exits.
        let _ = fd
            .readable()
            .await
            .map_err(crate::error::io("watch the init of", paths.dir()))?;
        if self.ours {
            // Whoever comes first reaps and records it.
            reap_recorded(fd.get_ref(), &paths.init_exit());
        }
        Ok(())
    }
}

/// Once the init is gone: when its status is not recorded, no stop was asked for and its
/// agent socket is still there (it did not end in order, or its reaper has yet to write),
/// gives its reaper a moment to record the status (it runs at the same moment as the
/// caller; an init this daemon did not start gets none, and costs this wait).
pub async fn settle(paths: &BoxPaths) {
    if paths.stop_requested().exists() || !paths.agent_socket().exists() {
        return;
    }
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    while read_status(&paths.init_exit()).is_none() && started.elapsed() < RECORD_WAIT {
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// How the box's last boot ended, from what its files say (see the module doc).
pub fn classify(paths: &BoxPaths) -> BoxExit {
    if paths.stop_requested().exists() {
        return BoxExit::Clean;
    }
    match read_status(&paths.init_exit()) {
        Some(VmmStatus::Exited(0)) => BoxExit::Clean,
        Some(VmmStatus::Exited(code)) => BoxExit::Crashed(format!(
            "berth-init exited with status {code}; console: {}",
            console_tail(paths)
        )),
        Some(VmmStatus::Killed(signal)) => BoxExit::Crashed(format!(
            "berth-init was killed by signal {signal} ({})",
            nix::sys::signal::Signal::try_from(signal).map_or("unknown signal", |s| s.as_str()),
        )),
        None if paths.agent_socket().exists() => BoxExit::Crashed(format!(
            "berth-init ended without shutting down (killed, or it died; it was not this daemon's child, so its status is unknown); console: {}",
            console_tail(paths)
        )),
        None => BoxExit::Clean,
    }
}

fn console_tail(paths: &BoxPaths) -> String {
    match crate::process::log_tail(&paths.console_log(), 16 * 1024, REASON_LINES) {
        Some(tail) if !tail.trim().is_empty() => format!("{:?}", tail.trim()),
        _ => "(nothing)".into(),
    }
}

/// The parent pid of `pid`, from `/proc/<pid>/stat`.
fn parent_of(pid: i32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) S ppid …`: the parent follows the state after the last ')'.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::vmm::write_status;

    #[test]
    fn a_stop_or_exit_0_is_clean_and_anything_else_says_what_happened() {
        let dir = tempfile::tempdir().unwrap();
        let paths = BoxPaths::at(dir.path().to_path_buf());
        std::fs::create_dir_all(paths.run_dir()).unwrap();
        std::fs::write(paths.console_log(), "boot\nsomething broke\n").unwrap();
        // Nothing recorded and no socket left: berth-init went its orderly way.
        assert_eq!(classify(&paths), BoxExit::Clean);
        std::fs::write(paths.agent_socket(), "").unwrap();
        assert!(matches!(classify(&paths), BoxExit::Crashed(r) if r.contains("status is unknown")));
        write_status(&paths.init_exit(), VmmStatus::Exited(0)).unwrap();
        assert_eq!(classify(&paths), BoxExit::Clean);
        write_status(&paths.init_exit(), VmmStatus::Killed(9)).unwrap();
        match classify(&paths) {
            BoxExit::Crashed(r) => {
                assert_eq!(r, "berth-init was killed by signal 9 (SIGKILL)")
            }
            other => panic!("{other:?}"),
        }
        write_status(&paths.init_exit(), VmmStatus::Exited(101)).unwrap();
        assert!(
            matches!(classify(&paths), BoxExit::Crashed(r) if r.contains("status 101") && r.contains("something broke"))
        );
        mark_stop(&paths);
        assert_eq!(classify(&paths), BoxExit::Clean);
        begin_boot(&paths).unwrap();
        assert!(!paths.stop_requested().exists() && !paths.init_exit().exists());
    }
}
