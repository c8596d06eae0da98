//! The jail a VMM process (QEMU, the channel bridge) runs in, like Firecracker's jailer
//! does for Firecracker: a guest's root owns its own kernel, so the VMM is the wall.
//!
//! The child, between fork and exec (system calls only: everything is computed before the
//! fork):
//! - joins the box's cgroup (`cgroup.rs`), while it is still root;
//! - gets its own mount namespace (private: nothing propagates back to the host) whose root
//!   is a fresh read-only tmpfs mounted on the box's empty `vm/root` dir, then
//!   `pivot_root`s into it and detaches the host's tree. The root holds only what the
//!   [`Jail`] lists, each bound alone at its own host path (so the VMM's argv, and the
//!   daemon's view of the sockets, stay as they are): the host's `/usr` read-only (the VMM
//!   and its libraries, with the merged-usr links), the few devices it needs, and the
//!   box's own files. No `/proc`, `/sys`, `/etc`, no other box;
//! - drops every capability from its bounding set, its supplementary groups, becomes the
//!   box's VMM uid/gid (which clears its permitted and effective sets), clears the
//!   inheritable set, sets `no_new_privs`, and installs its seccomp filter if it has one.
//!
//! A step that fails writes which one to the process's stderr (its log) and fails the
//! spawn with the error number.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use seccompiler::BpfProgram;

use crate::RuntimeError;

/// How a host path appears in the jail (always at its own path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read-only, nothing runs from it (images, the config disk).
    ReadOnly,
    /// Read-only, programs run from it (`/usr`, a VMM binary outside it).
    Exec,
    /// Writable (the volume, the console log, the sockets dir).
    ReadWrite,
    /// A device node (`/dev/null`, `/dev/kvm`).
    Device,
}

/// The host's top-level entries a dynamically linked VMM may need besides `/usr`:
/// merged-usr links are copied as links, real directories bound read-only.
const SYSTEM_DIRS: &[&str] = &["bin", "sbin", "lib", "lib64", "lib32", "libx32"];
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
    pub filter: Option<BpfProgram>,
}

/// One step of building the jail's root, in order.
#[derive(Debug)]
enum Step {
    Mkdir(CString),
    Symlink {
        target: CString,
        link: CString,
    },
    /// An empty file to bind a host file onto.
    File(CString),
    Bind {
        source: CString,
        target: CString,
        flags: libc::c_ulong,
    },
}

/// A [`Jail`] turned into C strings and steps, for the child to apply.
#[derive(Debug)]
pub(crate) struct Prepared {
    root: CString,
    steps: Vec<Step>,
    cgroup_procs: Vec<CString>,
    uid: u32,
    gid: u32,
    filter: Option<BpfProgram>,
}

fn c_path(path: &Path) -> Result<CString, RuntimeError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|e| RuntimeError::Io {
        action: "use as a jail path",
        path: path.to_path_buf(),
        source: io::Error::new(io::ErrorKind::InvalidInput, e),
    })
}

impl Jail {
    /// Computes every step (and checks the paths) before the fork.
    pub(crate) fn prepare(&self) -> Result<Prepared, RuntimeError> {
        let inside = |path: &Path| self.root.join(path.strip_prefix("/").unwrap_or(path));
        let mut steps = Vec::new();
        let mut made: BTreeSet<PathBuf> = BTreeSet::new();
        let mut mkdirs = |path: &Path, steps: &mut Vec<Step>| -> Result<(), RuntimeError> {
            let mut at = PathBuf::from("/");
            for part in path.components().skip(1) {
                at.push(part);
                if made.insert(at.clone()) {
                    steps.push(Step::Mkdir(c_path(&inside(&at))?));
                }
            }
            Ok(())
        };
        let mut binds = vec![(PathBuf::from("/usr"), Access::Exec)];
        for name in SYSTEM_DIRS {
            let host = Path::new("/").join(name);
            match std::fs::symlink_metadata(&host) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = std::fs::read_link(&host)
                        .map_err(crate::error::io("read the link", &host))?;
                    steps.push(Step::Symlink {
                        target: c_path(&target)?,
                        link: c_path(&inside(&host))?,
                    });
                }
                Ok(meta) if meta.is_dir() => binds.push((host, Access::Exec)),
                _ => {}
            }
        }
        for (path, access) in &self.paths {
            // Already there read-only through `/usr` (a VMM binary in /usr/local/bin).
            let covered = binds
                .iter()
                .any(|(dir, a)| *a == Access::Exec && path.starts_with(dir));
            if !(covered && matches!(access, Access::ReadOnly | Access::Exec)) {
                binds.push((path.clone(), *access));
            }
        }
        for (host, access) in binds {
            if !host.is_absolute() {
                return Err(RuntimeError::Io {
                    action: "bind into the VMM's jail (not an absolute path)",
                    path: host,
                    source: io::ErrorKind::InvalidInput.into(),
                });
            }
            let meta = std::fs::metadata(&host)
                .map_err(crate::error::io("stat for the VMM's jail", &host))?;
            let target = inside(&host);
            if let Some(parent) = host.parent() {
                mkdirs(parent, &mut steps)?;
            }
            if meta.is_dir() {
                mkdirs(&host, &mut steps)?;
            } else {
                steps.push(Step::File(c_path(&target)?));
            }
            let flags = libc::MS_BIND
                | libc::MS_REMOUNT
                | libc::MS_NOSUID
                | match access {
                    Access::ReadOnly => libc::MS_RDONLY | libc::MS_NODEV | libc::MS_NOEXEC,
                    Access::Exec => libc::MS_RDONLY | libc::MS_NODEV,
                    Access::ReadWrite => libc::MS_NODEV | libc::MS_NOEXEC,
                    Access::Device => libc::MS_NOEXEC,
                };
            steps.push(Step::Bind {
                source: c_path(&host)?,
                target: c_path(&target)?,
                flags,
            });
        }
        Ok(Prepared {
            root: c_path(&self.root)?,
            steps,
            cgroup_procs: self
                .cgroup_procs
                .iter()
                .map(|p| c_path(p))
                .collect::<Result<_, _>>()?,
            uid: self.uid,
            gid: self.gid,
            filter: self.filter.clone(),
        })
    }
}

/// Says which step failed on the child's stderr (its log), and returns the error.
fn failed(step: &'static [u8]) -> io::Error {
    let error = io::Error::last_os_error();
    // SAFETY: write(2) of a static buffer to fd 2; async-signal-safe.
    unsafe {
        libc::write(2, b"berth: cannot confine the VMM: ".as_ptr().cast(), 31);
        libc::write(2, step.as_ptr().cast(), step.len());
        libc::write(2, b"\n".as_ptr().cast(), 1);
    }
    error
}

fn check(rc: libc::c_int, step: &'static [u8]) -> io::Result<()> {
    if rc < 0 {
        Err(failed(step))
    } else {
        Ok(())
    }
}

impl Prepared {
    /// The hook a spawn runs between fork and exec (`crate::process::vmm::spawn`).
    pub(crate) fn into_pre_exec(self) -> crate::process::vmm::PreExec {
        Box::new(move || self.enter())
    }

    /// Enters the jail. Runs in the forked child before exec: system calls only, no
    /// allocation, no locks.
    pub(crate) fn enter(&self) -> io::Result<()> {
        // SAFETY: every call below is a plain system call on C strings and structs this
        // value owns, which live (unmoved) until exec; nothing is allocated or locked.
        unsafe {
            for procs in &self.cgroup_procs {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                check(fd, b"open cgroup.procs")?;
                let wrote = libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
                check(wrote as libc::c_int, b"join the cgroup")?;
            }
            check(
                libc::unshare(libc::CLONE_NEWNS),
                b"unshare the mount namespace",
            )?;
            let null = std::ptr::null::<libc::c_char>();
            check(
                libc::mount(
                    null,
                    c"/".as_ptr(),
                    null,
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ),
                b"make the mounts private",
            )?;
            check(
                libc::mount(
                    c"tmpfs".as_ptr(),
                    self.root.as_ptr(),
                    c"tmpfs".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    c"mode=0755,size=64k,nr_inodes=512".as_ptr().cast(),
                ),
                b"mount the root tmpfs",
            )?;
            for step in &self.steps {
                match step {
                    Step::Mkdir(path) => {
                        if libc::mkdir(path.as_ptr(), 0o755) < 0
                            && *libc::__errno_location() != libc::EEXIST
                        {
                            return Err(failed(b"mkdir"));
                        }
                    }
                    Step::Symlink { target, link } => {
                        check(libc::symlink(target.as_ptr(), link.as_ptr()), b"symlink")?
                    }
                    Step::File(path) => {
                        let fd = libc::open(
                            path.as_ptr(),
                            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                            0o600,
                        );
                        check(fd, b"create a mount point")?;
                        libc::close(fd);
                    }
                    Step::Bind {
                        source,
                        target,
                        flags,
                    } => {
                        check(
                            libc::mount(
                                source.as_ptr(),
                                target.as_ptr(),
                                null,
                                libc::MS_BIND,
                                std::ptr::null(),
                            ),
                            b"bind a path",
                        )?;
                        // A bind mount takes its flags only on a remount.
                        check(
                            libc::mount(null, target.as_ptr(), null, *flags, std::ptr::null()),
                            b"remount a bound path",
                        )?;
                    }
                }
            }
            check(libc::chdir(self.root.as_ptr()), b"chdir to the root")?;
            check(
                libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int,
                b"pivot_root",
            )?;
            // The host's tree now lies on top of the new root: detach it.
            check(
                libc::umount2(c".".as_ptr(), libc::MNT_DETACH),
                b"detach the host's tree",
            )?;
            check(libc::chdir(c"/".as_ptr()), b"chdir /")?;
            check(
                libc::mount(
                    null,
                    c"/".as_ptr(),
                    null,
                    libc::MS_REMOUNT
                        | libc::MS_RDONLY
                        | libc::MS_NOSUID
                        | libc::MS_NODEV
                        | libc::MS_NOEXEC,
                    std::ptr::null(),
                ),
                b"make the root read-only",
            )?;
            for cap in 0..64 {
                // EINVAL past the kernel's last capability.
                libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
            }
            check(libc::setgroups(0, std::ptr::null()), b"setgroups")?;
            check(libc::setresgid(self.gid, self.gid, self.gid), b"setresgid")?;
            // From root to an unprivileged uid: the permitted, effective and ambient sets
            // are cleared.
            check(libc::setresuid(self.uid, self.uid, self.uid), b"setresuid")?;
            let mut header = CapHeader {
                version: LINUX_CAPABILITY_VERSION_3,
                pid: 0,
            };
            let data = [CapData::default(); 2];
            check(
                libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) as libc::c_int,
                b"clear the inheritable capabilities",
            )?;
            check(
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                b"no_new_privs",
            )?;
            if let Some(filter) = &self.filter {
                let program = libc::sock_fprog {
                    len: filter.len() as libc::c_ushort,
                    filter: filter.as_ptr() as *mut libc::sock_filter,
                };
                check(
                    libc::prctl(
                        libc::PR_SET_SECCOMP,
                        libc::SECCOMP_MODE_FILTER,
                        &program as *const libc::sock_fprog,
                    ),
                    b"install the seccomp filter",
                )?;
            }
        }
        Ok(())
    }
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_make_each_parent_once_bind_at_the_host_path_and_skip_what_usr_holds() {
        let dir = tempfile::tempdir().unwrap();
        let volume = dir.path().join("box/volume.ext4");
        let run = dir.path().join("box/vm/run");
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(&volume, "").unwrap();
        let jail = Jail {
            root: dir.path().join("box/vm/root"),
            uid: 1 << 21,
            gid: 1 << 21,
            paths: vec![
                (PathBuf::from("/usr/bin/env"), Access::Exec),
                (volume.clone(), Access::ReadWrite),
                (run.clone(), Access::ReadWrite),
                (PathBuf::from("/dev/null"), Access::Device),
            ],
            cgroup_procs: vec![],
            filter: None,
        };
        let prepared = jail.prepare().unwrap();
        let root = jail.root.to_str().unwrap().to_owned();
        let binds: Vec<(String, String)> = prepared
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Bind { source, target, .. } => Some((
                    source.to_str().unwrap().to_owned(),
                    target
                        .to_str()
                        .unwrap()
                        .strip_prefix(&root)
                        .unwrap()
                        .to_owned(),
                )),
                _ => None,
            })
            .collect();
        let want = |p: &Path| (p.display().to_string(), p.display().to_string());
        assert_eq!(binds[0], want(Path::new("/usr")));
        assert!(binds.contains(&want(&volume)) && binds.contains(&want(&run)));
        assert!(binds.contains(&want(Path::new("/dev/null"))));
        assert!(!binds.iter().any(|(s, _)| s == "/usr/bin/env"), "{binds:?}");
        let mut mkdirs: Vec<&CString> = prepared
            .steps
            .iter()
            .filter_map(|s| match s {
                Step::Mkdir(p) => Some(p),
                _ => None,
            })
            .collect();
        let count = mkdirs.len();
        mkdirs.sort();
        mkdirs.dedup();
        assert_eq!(mkdirs.len(), count, "a dir made twice");
        assert!(Jail {
            paths: vec![(PathBuf::from("relative"), Access::ReadOnly)],
            ..jail
        }
        .prepare()
        .is_err());
    }
}
