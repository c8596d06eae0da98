//! The one owner of every exit status.
//!
//! PID 1 inherits every orphan of the box, so it must `waitpid(-1)`; mixing that with
//! per-child waits (tokio::process, `Child::wait`) would steal statuses from each other.
//! Instead one SIGCHLD-driven task loops `waitpid(-1, WNOHANG)` and hands each status to
//! the waiter registered for that pid; statuses of unregistered pids (orphans) are dropped.
//! A child is spawned and registered under the same lock, so the reaper can never see a
//! pid before its waiter exists.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

#[derive(Debug, Default)]
pub struct Reaper {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    waiters: HashMap<i32, oneshot::Sender<Exit>>,
    /// Process groups this agent started (each exec is its own session and group).
    groups: HashSet<i32>,
}

impl Reaper {
    /// Spawns with `spawn` (which returns the new pid) while holding the lock, then
    /// registers a waiter for that pid and its process group.
    pub fn spawn<T>(
        &self,
        spawn: impl FnOnce() -> std::io::Result<(i32, T)>,
    ) -> std::io::Result<(T, oneshot::Receiver<Exit>)> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (pid, value) = spawn()?;
        let (tx, rx) = oneshot::channel();
        inner.waiters.insert(pid, tx);
        if inner.groups.len() >= 64 {
            inner
                .groups
                .retain(|&pgid| !matches!(killpg(Pid::from_raw(pgid), None), Err(Errno::ESRCH)));
        }
        inner.groups.insert(pid);
        Ok((value, rx))
    }

    /// Reaps until SIGCHLD stops coming (forever).
    pub async fn run(&self) {
        let mut sigchld = match signal(SignalKind::child()) {
            Ok(s) => s,
            Err(err) => {
                eprintln!("berth-init: cannot watch SIGCHLD: {err}; falling back to polling");
                loop {
                    self.reap_all();
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        };
        loop {
            self.reap_all();
            sigchld.recv().await;
        }
    }

    /// Collects every exited child now.
    pub fn reap_all(&self) {
        loop {
            let status = match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => return,
                Err(Errno::EINTR) => continue,
                Err(err) => {
                    eprintln!("berth-init: waitpid failed: {err}");
                    return;
                }
                Ok(status) => status,
            };
            let (pid, exit) = match status {
                WaitStatus::Exited(pid, code) => (
                    pid,
                    Exit {
                        code: Some(code),
                        signal: None,
                    },
                ),
                WaitStatus::Signaled(pid, sig, _) => (
                    pid,
                    Exit {
                        code: None,
                        signal: Some(sig as i32),
                    },
                ),
                _ => continue,
            };
            let waiter = self
                .inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .waiters
                .remove(&pid.as_raw());
            if let Some(tx) = waiter {
                let _ = tx.send(exit);
            }
        }
    }

    /// Signals every process group this agent started; forgets the ones that are gone.
    /// Returns how many groups still had members.
    pub fn signal_groups(&self, sig: Option<Signal>) -> usize {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .groups
            .retain(|&pgid| !matches!(killpg(Pid::from_raw(pgid), sig), Err(Errno::ESRCH)));
        inner.groups.len()
    }

    /// Forgets a process group once it has no members left.
    pub fn forget_group_if_empty(&self, pgid: i32) {
        if let Err(Errno::ESRCH) = killpg(Pid::from_raw(pgid), None) {
            self.inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .groups
                .remove(&pgid);
        }
    }
}

/// Kills a process group (SIGKILL); a group already gone is fine.
pub fn kill_group(pgid: i32) {
    let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[tokio::test(flavor = "current_thread")]
    async fn statuses_go_to_their_waiters_and_orphans_are_dropped() {
        let reaper = std::sync::Arc::new(Reaper::default());
        let r = reaper.clone();
        tokio::spawn(async move { r.run().await });
        let spawn = |script: &'static str| {
            reaper
                .spawn(|| {
                    let mut cmd = std::process::Command::new("/bin/sh");
                    cmd.args(["-c", script]);
                    // SAFETY: setsid is async-signal-safe.
                    unsafe { cmd.pre_exec(|| nix::unistd::setsid().map(drop).map_err(Into::into)) };
                    let child = cmd.spawn()?;
                    Ok((child.id() as i32, child.id()))
                })
                .unwrap()
        };
        let (_, a) = spawn("exit 3");
        let (pid, b) = spawn("kill -9 $$");
        assert_eq!(
            a.await.unwrap(),
            Exit {
                code: Some(3),
                signal: None
            }
        );
        assert_eq!(
            b.await.unwrap(),
            Exit {
                code: None,
                signal: Some(9)
            }
        );
        reaper.forget_group_if_empty(pid as i32);
        assert!(!reaper.inner.lock().unwrap().groups.contains(&(pid as i32)));
    }
}
