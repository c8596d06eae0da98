//! The `limits` phase of a VM: the box's process limit (`limits.pids`), enforced by a
//! cgroup of the guest kernel.
//!
//! A sandbox's container cgroup already holds `berth-init` and everything it starts. A
//! VM's guest kernel has no such cgroup, so `berth-init` makes one: cgroup2 with the
//! `pids` controller, one child cgroup `/box` whose `pids.max` is the config disk's
//! `pids_max`, and every process it starts for the box (the harness, each exec) moves
//! itself into `/box` between fork and exec ([`BoxCgroup::join_from_child`]).
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

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// Where the box sees the (read-only) cgroup2 hierarchy.
pub const CGROUP_VIEW: &str = "/sys/fs/cgroup";
/// The box's cgroup, a child of the root.
pub const BOX_CGROUP: &str = "box";
/// Where the writable instance is mounted while it is set up, inside the run directory.
const SETUP_DIR: &str = "cgroup";
/// The largest `pids.max` the kernel takes (`PID_MAX_LIMIT` on 64-bit); more is `max`.
const PID_MAX_LIMIT: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot make {path}")]
    Dir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot mount cgroup2 on {path} (does the kernel have cgroup v2?)")]
    Mount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot write {value:?} to {path}")]
    Write {
        path: PathBuf,
        value: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot open {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// The box's cgroup, as `berth-init` holds it: `cgroup.procs`, open for writing on an
/// instance the box cannot reach.
#[derive(Debug)]
pub struct BoxCgroup {
    procs: OwnedFd,
}

impl BoxCgroup {
    /// Moves the calling process into the box's cgroup. Runs in a child between fork and
    /// exec (async-signal-safe: one `write`), before the child drops root. The open file
    /// is close-on-exec, so the program never holds it.
    pub fn join_from_child(&self) -> io::Result<()> {
        // "0" is the writing process itself.
        // SAFETY: a valid fd and a 1-byte static buffer.
        let n = unsafe { libc::write(self.procs.as_raw_fd(), b"0".as_ptr().cast(), 1) };
        if n == 1 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// The `limits` phase: the box's cgroup with `pids_max`, and the read-only view at
/// [`CGROUP_VIEW`]. `None` (after a warning) when the kernel cannot do it: the box then
/// runs without a process limit, as before this phase existed.
pub fn start(run_dir: &Path, pids_max: Option<u64>) -> Option<BoxCgroup> {
    let cgroup = match setup(&run_dir.join(SETUP_DIR), pids_max) {
        Ok(cgroup) => Some(cgroup),
        Err(err) => {
            warn("the box has no process limit", &err);
            None
        }
    };
    if let Err(err) = mount_view(Path::new(CGROUP_VIEW)) {
        warn("the box sees no cgroups", &err);
    }
    cgroup
}

/// One console line with the cause chain.
fn warn(what: &str, err: &CgroupError) {
    let mut line = format!("berth-init: warning: {what}: {err}");
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        line.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    eprintln!("{line}");
}

/// Mounts a writable cgroup2 at `dir`, makes the box's cgroup, and detaches the mount
/// again whatever happened: once this returns, only the open file reaches it.
fn setup(dir: &Path, pids_max: Option<u64>) -> Result<BoxCgroup, CgroupError> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|source| CgroupError::Dir {
            path: dir.to_owned(),
            source,
        })?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    let mounted = mount(Some("cgroup2"), dir, Some("cgroup2"), flags, None::<&str>);
    let result = mounted
        .map_err(|source| CgroupError::Mount {
            path: dir.to_owned(),
            source,
        })
        .and_then(|()| configure(dir, pids_max));
    let _ = umount2(dir, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir(dir);
    result
}

/// Inside a cgroup2 root: the pids controller for the children, the box's cgroup with
/// its limit, and its `cgroup.procs` opened.
fn configure(root: &Path, pids_max: Option<u64>) -> Result<BoxCgroup, CgroupError> {
    write(&root.join("cgroup.subtree_control"), "+pids")?;
    let dir = root.join(BOX_CGROUP);
    match std::fs::create_dir(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(source) => return Err(CgroupError::Dir { path: dir, source }),
    }
    write(&dir.join("pids.max"), &pids_max_text(pids_max))?;
    let procs = dir.join("cgroup.procs");
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&procs)
        .map_err(|source| CgroupError::Open {
            path: procs,
            source,
        })?;
    Ok(BoxCgroup { procs: file.into() })
}

/// What `pids.max` gets: the limit, or `max` for none (and for 0, which the host never
/// sends: a box whose `limits.pids` is 0 has no limit, as in a sandbox).
fn pids_max_text(pids_max: Option<u64>) -> String {
    match pids_max {
        Some(n) if n > 0 && n <= PID_MAX_LIMIT => n.to_string(),
        _ => "max".to_owned(),
    }
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

/// Writes a control file (which exists: cgroupfs files cannot be created).
fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|source| CgroupError::Write {
            path: path.to_owned(),
            value: value.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory shaped like a cgroup2 root with the box's cgroup already made.
    fn fake_root() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.subtree_control"), "").unwrap();
        std::fs::create_dir(root.path().join(BOX_CGROUP)).unwrap();
        for file in ["pids.max", "cgroup.procs"] {
            std::fs::write(root.path().join(BOX_CGROUP).join(file), "").unwrap();
        }
        root
    }

    #[test]
    fn the_box_cgroup_gets_the_limit_and_children_join_it() {
        let root = fake_root();
        let cgroup = configure(root.path(), Some(64)).unwrap();
        let read = |p: &str| std::fs::read_to_string(root.path().join(p)).unwrap();
        assert_eq!(read("cgroup.subtree_control"), "+pids");
        assert_eq!(read("box/pids.max"), "64");
        cgroup.join_from_child().unwrap();
        assert_eq!(read("box/cgroup.procs"), "0");
        // The program a child execs never holds the file.
        let flags = nix::fcntl::fcntl(cgroup.procs.as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD);
        assert!(nix::fcntl::FdFlag::from_bits_truncate(flags.unwrap())
            .contains(nix::fcntl::FdFlag::FD_CLOEXEC));
    }

    #[test]
    fn no_limit_zero_and_too_large_are_max() {
        assert_eq!(pids_max_text(None), "max");
        assert_eq!(pids_max_text(Some(0)), "max");
        assert_eq!(pids_max_text(Some(1)), "1");
        assert_eq!(pids_max_text(Some(PID_MAX_LIMIT)), "4194304");
        assert_eq!(pids_max_text(Some(PID_MAX_LIMIT + 1)), "max");
        assert_eq!(pids_max_text(Some(u64::MAX)), "max");
        let root = fake_root();
        configure(root.path(), None).unwrap();
        let max = std::fs::read_to_string(root.path().join("box/pids.max")).unwrap();
        assert_eq!(max, "max");
    }

    #[test]
    fn a_kernel_without_the_pids_controller_is_an_error_naming_the_file() {
        // No cgroup.subtree_control: what a root without cgroup2 looks like.
        let root = tempfile::tempdir().unwrap();
        let err = configure(root.path(), Some(64)).unwrap_err();
        assert!(
            matches!(&err, CgroupError::Write { value, .. } if value == "+pids"),
            "{err:?}"
        );
        assert!(err.to_string().contains("cgroup.subtree_control"), "{err}");
        // A setup dir that cannot be made fails before mounting anything.
        let err = setup(&root.path().join("no/such/dir"), Some(64)).unwrap_err();
        assert!(matches!(err, CgroupError::Dir { .. }), "{err:?}");
    }
}
