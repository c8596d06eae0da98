//! The `limits` phase of a VM: the box's process limit (`limits.pids`), enforced by a
//! cgroup of the guest kernel.
//!
//! A sandbox's `berth-init` splits the container cgroup the host delegates to it
//! ([`crate::sandbox_cgroup`]). A VM's guest kernel has no such cgroup, so `berth-init`
//! makes one ([`crate::box_cgroup`]): cgroup2 with the `pids` controller, one child cgroup
//! `/box` whose `pids.max` is the config disk's `pids_max`, and every process it starts for
//! the box (the harness, each exec) moves itself into `/box` between fork and exec
//! ([`BoxCgroup::join_from_child`]). (The VM's memory limit is its RAM.)
//! `berth-init` itself stays in the root cgroup, which has no limit: a fork bomb in the
//! box fills `/box` and nothing else, and `berth-init` still answers, starts execs (moving
//! a process into a cgroup is not limited by `pids.max`, only forking inside it is) and
//! stops the box.
//!
//! The box must not lift the limit. The writable cgroup2 instance is mounted only in the
//! root-only run directory, set up, and detached (`MNT_DETACH`) before any box process
//! exists; `berth-init` keeps just an open `/box/cgroup.procs` (a file, never a directory,
//! so nothing else can be reached from it). The box sees cgroup2 at `/sys/fs/cgroup`
//! read-only: `echo max > /sys/fs/cgroup/box/pids.max` or
//! `echo $$ > /sys/fs/cgroup/cgroup.procs` fails with `EROFS` even for box root, and the
//! box user (uid 1001, no capabilities, no `mount`) cannot do more. Box root in a VM is
//! the guest kernel's root by design (it may mount, load modules): it can mount a cgroup2
//! of its own and lift the limit on purpose. The limit protects `berth-init` from what
//! the agent's processes do, not from the box's administrator.
//!
//! A kernel without cgroup2 or the pids controller leaves the box unlimited, with a
//! warning on the console; the boot goes on.

use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;

use nix::mount::{mount, umount2, MntFlags, MsFlags};

pub use crate::box_cgroup::BoxCgroup;
use crate::box_cgroup::{self, BoxLimits, CgroupError};

/// Where the box sees the (read-only) cgroup2 hierarchy.
pub const CGROUP_VIEW: &str = "/sys/fs/cgroup";
/// Where the writable instance is mounted while it is set up, inside the run directory.
const SETUP_DIR: &str = "cgroup";

/// The `limits` phase: the box's cgroup with `pids_max`, and the read-only view at
/// [`CGROUP_VIEW`]. `None` (after a warning) when the kernel cannot do it: the box then
/// runs without a process limit, as before this phase existed.
pub fn start(run_dir: &Path, pids_max: Option<u64>) -> Option<BoxCgroup> {
    let cgroup = match setup(&run_dir.join(SETUP_DIR), pids_max) {
        Ok(procs) => BoxCgroup::new(vec![procs]),
        Err(err) => {
            box_cgroup::warn("the box has no process limit", &err);
            None
        }
    };
    if let Err(err) = mount_view(Path::new(CGROUP_VIEW)) {
        box_cgroup::warn("the box sees no cgroups", &err);
    }
    cgroup
}

/// Mounts a writable cgroup2 at `dir`, makes the box's cgroup, and detaches the mount
/// again whatever happened: once this returns, only the open file reaches it.
fn setup(dir: &Path, pids_max: Option<u64>) -> Result<OwnedFd, CgroupError> {
    let io_error = |source| CgroupError::Path {
        path: dir.to_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(io_error)?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let mounted = mount(Some("cgroup2"), dir, Some("cgroup2"), flags, None::<&str>);
    let limits = BoxLimits {
        pids_max,
        memory_max_bytes: None,
    };
    let result = mounted
        .map_err(|source| CgroupError::Mount {
            path: dir.to_owned(),
            source,
        })
        .and_then(|()| std::fs::File::open(dir).map_err(io_error))
        // berth-init stays in the root cgroup, which has no limit.
        .and_then(|root| box_cgroup::split_v2(&root.into(), limits, false));
    let _ = umount2(dir, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir(dir);
    result
}

/// The box's view of the hierarchy: a second cgroup2 mount, read-only.
fn mount_view(path: &Path) -> Result<(), CgroupError> {
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("cgroup2"), path, Some("cgroup2"), flags, None::<&str>).map_err(|source| {
        CgroupError::Mount {
            path: path.to_owned(),
            source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setup_dir_that_cannot_be_made_fails_before_mounting_anything() {
        let root = tempfile::tempdir().unwrap();
        let err = setup(&root.path().join("no/such/dir"), Some(64)).unwrap_err();
        assert!(matches!(err, CgroupError::Path { .. }), "{err:?}");
        assert!(err.to_string().contains("no/such/dir"), "{err}");
    }
}
