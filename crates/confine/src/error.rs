//! What can go wrong: [`ConfineError`] before the fork (building a filter or a jail),
//! [`StepError`] in the forked child (no allocation: a step and an errno).

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    #[error("cannot compile the seccomp table {table}")]
    Seccomp {
        table: &'static str,
        #[source]
        source: seccompiler::BackendError,
    },
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot use {} in a jail: {why}", path.display())]
    JailPath { path: PathBuf, why: &'static str },
    #[error("cannot read the capability bounding set")]
    BoundingSet(#[source] io::Error),
}

/// One step of entering a confinement, named for the log of the process that failed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    UnshareMountNamespace,
    MakeMountsPrivate,
    MountRoot,
    MakeDirectory,
    Symlink,
    CreateMountPoint,
    Bind,
    RemountBind,
    ChdirRoot,
    PivotRoot,
    DetachHostTree,
    MakeRootReadOnly,
    DropBoundingSet,
    ClearAmbient,
    DropGroups,
    SetGid,
    SetUid,
    ClearCapabilities,
    NoNewPrivs,
    InstallSeccomp,
}

impl Step {
    /// What the step does, as static text (writable from a forked child).
    pub fn as_str(self) -> &'static str {
        match self {
            Step::UnshareMountNamespace => "unshare the mount namespace",
            Step::MakeMountsPrivate => "make the mounts private",
            Step::MountRoot => "mount the root tmpfs",
            Step::MakeDirectory => "mkdir",
            Step::Symlink => "symlink",
            Step::CreateMountPoint => "create a mount point",
            Step::Bind => "bind a path",
            Step::RemountBind => "remount a bound path",
            Step::ChdirRoot => "chdir to the root",
            Step::PivotRoot => "pivot_root",
            Step::DetachHostTree => "detach the host's tree",
            Step::MakeRootReadOnly => "make the root read-only",
            Step::DropBoundingSet => "drop the capability bounding set",
            Step::ClearAmbient => "clear the ambient capabilities",
            Step::DropGroups => "setgroups",
            Step::SetGid => "setresgid",
            Step::SetUid => "setresuid",
            Step::ClearCapabilities => "clear the capability sets",
            Step::NoNewPrivs => "no_new_privs",
            Step::InstallSeccomp => "install the seccomp filter",
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A step that failed in the forked child, with the error number the kernel gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot confine the process: {step} failed (errno {errno})")]
pub struct StepError {
    pub step: Step,
    pub errno: i32,
}

impl StepError {
    /// The step that just failed, with the calling thread's errno.
    pub(crate) fn last(step: Step) -> StepError {
        StepError {
            step,
            errno: io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        }
    }

    /// Writes which step failed to fd 2 (the process's log), without allocating.
    pub fn log(&self, who: &'static str) {
        let parts: [&[u8]; 5] = [
            b"berth: cannot confine ",
            who.as_bytes(),
            b": ",
            self.step.as_str().as_bytes(),
            b"\n",
        ];
        for part in parts {
            // SAFETY: write(2) of a static buffer to fd 2; async-signal-safe.
            unsafe { libc::write(2, part.as_ptr().cast(), part.len()) };
        }
    }
}

impl From<StepError> for io::Error {
    fn from(e: StepError) -> io::Error {
        io::Error::from_raw_os_error(e.errno)
    }
}

/// `Ok` when a system call's return value says it succeeded, else the step's error.
pub(crate) fn check(rc: libc::c_long, step: Step) -> Result<(), StepError> {
    if rc < 0 {
        Err(StepError::last(step))
    } else {
        Ok(())
    }
}
