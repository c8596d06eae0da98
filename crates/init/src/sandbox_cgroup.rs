//! The `limits` phase of a sandbox: the box's own cgroup inside the container's.
//!
//! The host gives the container's cgroup the box's limits plus a reserve for `berth-init`,
//! delegates its directory to box root (the directory and, on cgroup2, its `cgroup.procs`,
//! `cgroup.subtree_control` and `cgroup.threads`) and passes it open to `berth-init` as
//! file descriptors from [`SANDBOX_CGROUP_FIRST_FD`] on (one per hierarchy: cgroup2, or the
//! v1 `pids` and `memory` ones). `berth-init` makes the box's cgroup in each with the box's
//! own limits (from its environment, [`SANDBOX_PIDS_MAX_ENV`] and
//! [`SANDBOX_MEMORY_MAX_ENV`]), keeps the box cgroups' `cgroup.procs` open and closes the
//! directories: see [`crate::box_cgroup`].
//!
//! Nobody in the box can redo this: the box sees its cgroups only through the read-only
//! `/sys/fs/cgroup` the OCI runtime mounts, cannot mount another (no `CAP_SYS_ADMIN`, and
//! the bundle's seccomp filter refuses `mount`), and cannot take `berth-init`'s descriptors
//! (it is non-dumpable and box root has no `CAP_SYS_PTRACE`).
//!
//! A host that passed nothing (an older host, or an OCI runtime that cannot pass
//! descriptors) leaves the box's processes in `berth-init`'s cgroup, with a warning.

use std::os::fd::{FromRawFd, OwnedFd};

use berth_protocol::guest::{
    SANDBOX_CGROUP_FIRST_FD, SANDBOX_MEMORY_MAX_ENV, SANDBOX_PIDS_MAX_ENV,
};
use nix::sys::statfs::{fstatfs, CGROUP2_SUPER_MAGIC, CGROUP_SUPER_MAGIC};

use crate::box_cgroup::{self, BoxCgroup, BoxLimits};

/// At most this many hierarchies are passed (cgroup2: one; v1: `pids` and `memory`).
const MAX_DIRS: i32 = 8;

/// The `limits` phase: the box's cgroup in every delegated hierarchy, or `None` (after a
/// warning) when there is none.
pub fn start() -> Option<BoxCgroup> {
    let limits = limits_from_env();
    let mut procs = Vec::new();
    for (dir, v2) in inherited_dirs() {
        let made = if v2 {
            box_cgroup::split_v2(&dir, limits, true).map(Some)
        } else {
            box_cgroup::split_v1(&dir, limits)
        };
        match made {
            Ok(Some(fd)) => procs.push(fd),
            Ok(None) => {}
            Err(err) => box_cgroup::warn("a box limit is shared with berth-init", &err),
        }
    }
    let cgroup = BoxCgroup::new(procs);
    if cgroup.is_none() {
        eprintln!(
            "berth-init: warning: the host delegated no cgroup: the box's processes share berth-init's limits"
        );
    }
    cgroup
}

/// The box's limits as the host wrote them into the environment.
fn limits_from_env() -> BoxLimits {
    let number = |name| std::env::var(name).ok().and_then(|v| v.parse().ok());
    BoxLimits {
        pids_max: number(SANDBOX_PIDS_MAX_ENV),
        memory_max_bytes: number(SANDBOX_MEMORY_MAX_ENV),
    }
}

/// The cgroup directories passed from [`SANDBOX_CGROUP_FIRST_FD`] on, each with whether it
/// is cgroup2; the first descriptor that is not one ends the list (and is left alone).
fn inherited_dirs() -> Vec<(OwnedFd, bool)> {
    let mut dirs = Vec::new();
    for fd in SANDBOX_CGROUP_FIRST_FD..SANDBOX_CGROUP_FIRST_FD + MAX_DIRS {
        // SAFETY: fstatfs only reads the descriptor; a closed one fails with EBADF.
        let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
        let v2 = match fstatfs(borrowed).map(|s| s.filesystem_type()) {
            Ok(t) if t == CGROUP2_SUPER_MAGIC => true,
            Ok(t) if t == CGROUP_SUPER_MAGIC => false,
            _ => break,
        };
        // SAFETY: the host passed this descriptor to berth-init alone; from now on it is
        // owned here (and closed when the box cgroup is made).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // Never inherited by anything berth-init starts.
        let _ = nix::fcntl::fcntl(
            fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        dirs.push((owned, v2));
    }
    dirs
}
