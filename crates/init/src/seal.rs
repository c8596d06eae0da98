//! The `seal` phase and the sealing of user processes.
//!
//! `berth-init` itself is made non-dumpable (no ptrace, no /proc/1/mem, no core: the boot
//! token lives in its memory), drops supplementary groups, and becomes the child
//! subreaper (a no-op as PID 1; outside a container it makes orphans of our children ours).
//!
//! User processes (`user: "user"`) run as uid/gid 1001 with no capabilities (bounding,
//! ambient and inheritable sets cleared, then `setresuid` clears permitted/effective),
//! `no_new_privs`, and the [`UserFilter`] seccomp programs on top of the bundle's. The BPF
//! programs are compiled once at boot; [`seal_user_child`] runs between fork and exec and
//! only makes system calls (no allocation, no locks).
//!
//! `ptrace` stays allowed: debuggers and `strace` on the user's own processes are useful to
//! an agent, the kernel already limits it to same-uid non-privileged targets, and PID 1 is
//! root-owned and non-dumpable, so the user cannot attach to it.

use std::io;

use berth_confine::{tables::BOX_USER, Filter, PrivilegeDrop};
use berth_protocol::guest::BOX_USER_UID;

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("seal phase: prctl({what}) failed")]
    Prctl {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("seal phase: cannot drop supplementary groups")]
    Groups(#[source] nix::Error),
    #[error("seal phase: cannot prepare the box user's confinement")]
    Confine(#[from] berth_confine::ConfineError),
}

/// What the box user's processes get on top of the box's own confinement, prepared once at
/// boot: the seccomp table [`BOX_USER`] (its doc says what is refused and why each answer)
/// compiled for the architecture berth-init is built for, and the checked privilege drop.
#[derive(Debug)]
pub struct UserFilter {
    filter: Filter,
    drop: PrivilegeDrop,
}

impl UserFilter {
    pub fn build() -> Result<Self, SealError> {
        Ok(UserFilter {
            filter: Filter::compile(&BOX_USER)?,
            drop: PrivilegeDrop::to(BOX_USER_UID, BOX_USER_UID)?,
        })
    }
}

/// The `seal` phase for `berth-init` itself.
pub fn seal_self() -> Result<(), SealError> {
    prctl("PR_SET_DUMPABLE", libc::PR_SET_DUMPABLE, 0)?;
    prctl("PR_SET_CHILD_SUBREAPER", libc::PR_SET_CHILD_SUBREAPER, 1)?;
    // In a user namespace whose setgroups is denied (rootless), the call fails with EPERM;
    // that is fine when there are no supplementary groups to drop.
    match nix::unistd::setgroups(&[]) {
        Err(nix::errno::Errno::EPERM) if nix::unistd::getgroups().is_ok_and(|g| g.is_empty()) => {}
        other => other.map_err(SealError::Groups)?,
    }
    // SAFETY: umask only changes this process's file mode creation mask.
    unsafe { libc::umask(0o022) };
    // The kernel's OOM killer never picks berth-init: a memory hog in the box must not take
    // the agent down with it. In a sandbox the OCI runtime has set this already (box root
    // may not lower it); in a VM berth-init is the kernel's root and sets it here.
    if let Err(err) = std::fs::write("/proc/self/oom_score_adj", INIT_OOM_SCORE_ADJ.to_string()) {
        eprintln!("berth-init: warning: cannot set oom_score_adj {INIT_OOM_SCORE_ADJ}: {err}");
    }
    Ok(())
}

/// berth-init's `oom_score_adj`: never chosen by the OOM killer.
pub const INIT_OOM_SCORE_ADJ: i32 = -1000;

fn prctl(what: &'static str, option: libc::c_int, arg: libc::c_ulong) -> Result<(), SealError> {
    // SAFETY: these prctl options take one integer argument and touch no memory of ours.
    let rc = unsafe { libc::prctl(option, arg, 0, 0, 0) };
    if rc != 0 {
        return Err(SealError::Prctl {
            what,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Runs in the child between fork and exec (async-signal-safe: system calls only).
/// Starts a new session (its own process group), gives the process the default
/// `oom_score_adj` (0, not berth-init's), then for the box user drops every capability and
/// privilege (each step checked: a refused drop fails the spawn) and installs the user
/// filter.
pub fn seal_user_child(as_user: bool, uid: u32, filter: &UserFilter) -> io::Result<()> {
    // SAFETY: setsid takes no arguments.
    check(unsafe { libc::setsid() }.into())?;
    reset_oom_score_adj()?;
    if !as_user {
        return Ok(());
    }
    filter.drop.with_ids(uid, uid).apply()?;
    filter.filter.install()?;
    Ok(())
}

/// Writes 0 to `/proc/self/oom_score_adj` (raising it is always allowed). A child left at
/// berth-init's −1000 would be the one process the OOM killer could never stop.
fn reset_oom_score_adj() -> io::Result<()> {
    // SAFETY: a NUL-terminated static path; the fd is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/oom_score_adj".as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    };
    check(fd.into())?;
    // SAFETY: a valid fd and a 1-byte static buffer.
    let n = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
    let written = if n == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: closes the fd opened above, once.
    unsafe { libc::close(fd) };
    written
}

fn check(rc: libc::c_long) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_filter_compiles() {
        let filter = UserFilter::build().unwrap();
        assert_eq!(filter.filter.program_count(), 3);
    }
}
