//! The jail a VMM process (QEMU, the channel bridge) runs in, like Firecracker's jailer
//! does for Firecracker: a guest's root owns its own kernel, so the VMM is the wall.
//!
//! The child, between fork and exec (system calls only: everything is computed before the
//! fork):
//! - joins the box's cgroup (`cgroup.rs`), while it is still root;
//! - enters a [`berth_confine::Jail`]: its own private mount namespace whose root is a fresh
//!   read-only tmpfs on the box's empty `vm/root` dir, holding only what the [`Jail`]
//!   lists, each bound alone at its own host path (so the VMM's argv, and the daemon's view
//!   of the sockets, stay as they are): the host's `/usr` read-only (the VMM and its
//!   libraries, with the merged-usr links), the few devices it needs, and the box's own
//!   files. No `/proc`, `/sys`, `/etc`, no other box;
//! - takes the checked [`berth_confine::PrivilegeDrop`] to the box's VMM uid/gid (every
//!   capability up to the kernel's last leaves the bounding set, no groups, no capability
//!   in any set), sets `no_new_privs`, and installs its seccomp filter if it has one.
//!
//! A step that fails writes which one to the process's stderr (its log) and fails the
//! spawn with the error number.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub(crate) use berth_confine::Access;
use berth_confine::{ConfineError, Filter, PreparedJail, PrivilegeDrop};

use crate::RuntimeError;

/// The devices every VMM gets; `/dev/kvm` is added when the VM runs under KVM.
pub(crate) const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/urandom"];

/// What one VMM process may see and be.
#[derive(Debug, Clone)]
pub(crate) struct Jail {
    /// An empty host directory: the child mounts its private root on it.
    pub root: PathBuf,
    pub uid: u32,
    pub gid: u32,
    /// Host paths bound into the jail at the same path (besides `/usr` and its links).
    pub paths: Vec<(PathBuf, Access)>,
    /// The `cgroup.procs` files the child writes itself into.
    pub cgroup_procs: Vec<PathBuf>,
    /// A seccomp filter installed last (QEMU installs its own through `-sandbox`).
    pub filter: Option<Filter>,
}

/// A [`Jail`] computed for the child to enter.
#[derive(Debug)]
pub(crate) struct Prepared {
    cgroup_procs: Vec<CString>,
    jail: PreparedJail,
    drop: PrivilegeDrop,
    filter: Option<Filter>,
}

fn confine_error(path: &Path) -> impl FnOnce(ConfineError) -> RuntimeError + '_ {
    move |e| RuntimeError::Io {
        action: "prepare the VMM's jail at",
        path: path.to_path_buf(),
        source: io::Error::other(e),
    }
}

impl Jail {
    /// Computes every step (and checks the paths) before the fork.
    pub(crate) fn prepare(&self) -> Result<Prepared, RuntimeError> {
        let mut jail = berth_confine::Jail::new(&self.root);
        for (path, access) in &self.paths {
            jail.bind(path, *access);
        }
        let cgroup_procs = self
            .cgroup_procs
            .iter()
            .map(|p| {
                CString::new(p.as_os_str().as_bytes()).map_err(|e| RuntimeError::Io {
                    action: "use as a jail path",
                    path: p.clone(),
                    source: io::Error::new(io::ErrorKind::InvalidInput, e),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Prepared {
            cgroup_procs,
            jail: jail.prepare().map_err(confine_error(&self.root))?,
            drop: PrivilegeDrop::to(self.uid, self.gid).map_err(confine_error(&self.root))?,
            filter: self.filter.clone(),
        })
    }
}

/// Says which cgroup step failed on the child's stderr (its log), and returns the error.
fn cgroup_failed(step: &'static [u8]) -> io::Error {
    let error = io::Error::last_os_error();
    // SAFETY: write(2) of static buffers to fd 2; async-signal-safe.
    unsafe {
        libc::write(2, b"berth: cannot confine the VMM: ".as_ptr().cast(), 31);
        libc::write(2, step.as_ptr().cast(), step.len());
        libc::write(2, b"\n".as_ptr().cast(), 1);
    }
    error
}

impl Prepared {
    /// The hook a spawn runs between fork and exec (`crate::process::vmm::spawn`).
    pub(crate) fn into_pre_exec(self) -> crate::process::vmm::PreExec {
        Box::new(move || self.enter())
    }

    /// Enters the jail. Runs in the forked child before exec: system calls only, no
    /// allocation, no locks.
    pub(crate) fn enter(&self) -> io::Result<()> {
        for procs in &self.cgroup_procs {
            // SAFETY: a NUL-terminated path this value owns; the fd is closed below.
            let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
            if fd < 0 {
                return Err(cgroup_failed(b"open cgroup.procs"));
            }
            // SAFETY: a valid fd and a 1-byte static buffer; closed once.
            let wrote = unsafe { libc::write(fd, b"0".as_ptr().cast(), 1) };
            let joined = if wrote < 0 {
                Err(cgroup_failed(b"join the cgroup"))
            } else {
                Ok(())
            };
            // SAFETY: closes the fd opened above, once.
            unsafe { libc::close(fd) };
            joined?;
        }
        let confined = self
            .jail
            .enter()
            .and_then(|()| self.drop.apply())
            .and_then(|()| self.filter.as_ref().map_or(Ok(()), Filter::install));
        confined.map_err(|failed| {
            failed.log("the VMM");
            failed.into()
        })
    }
}
