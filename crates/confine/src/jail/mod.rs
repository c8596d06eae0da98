//! The jail a confined program runs in, like Firecracker's jailer: its own mount namespace
//! (private: nothing propagates back to the host) whose root is a fresh read-only tmpfs
//! mounted on an empty host directory, entered with `pivot_root`, the host's tree detached.
//!
//! The root holds only what the [`Jail`] lists: the host's `/usr` read-only (the program and
//! its libraries, with the merged-usr links copied as links, or real `/lib`-style
//! directories bound read-only), and the caller's paths, each bound alone with its
//! [`Access`]. No `/proc`, `/sys`, `/etc` unless listed.
//!
//! Everything is computed before the fork ([`Jail::prepare`]); the child only makes system
//! calls ([`PreparedJail::enter`]). Capabilities are dropped separately
//! ([`crate::PrivilegeDrop`]), after whatever else the caller must do as root.

mod enter;

use std::collections::BTreeSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::ConfineError;

/// How a host path appears in the jail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only, nothing runs from it (images, a config disk, the file a tool checks).
    ReadOnly,
    /// Read-only, programs run from it (`/usr`, a program outside it).
    Exec,
    /// Writable, nothing runs from it (a volume, a log, a sockets dir).
    ReadWrite,
    /// A device node (`/dev/null`, `/dev/kvm`).
    Device,
}

impl Access {
    /// The flags of the bind's remount (a bind mount takes its flags only on a remount).
    fn remount_flags(self) -> libc::c_ulong {
        libc::MS_BIND
            | libc::MS_REMOUNT
            | libc::MS_NOSUID
            | match self {
                Access::ReadOnly => libc::MS_RDONLY | libc::MS_NODEV | libc::MS_NOEXEC,
                Access::Exec => libc::MS_RDONLY | libc::MS_NODEV,
                Access::ReadWrite => libc::MS_NODEV | libc::MS_NOEXEC,
                Access::Device => libc::MS_NOEXEC,
            }
    }
}

/// The host's top-level entries a dynamically linked program may need besides `/usr`.
pub const SYSTEM_DIRS: &[&str] = &["bin", "sbin", "lib", "lib64", "lib32", "libx32"];

/// One host path bound into the jail.
#[derive(Debug, Clone)]
struct Bind {
    host: PathBuf,
    inside: PathBuf,
    access: Access,
}

/// What a jail holds (see the module doc).
#[derive(Debug, Clone)]
pub struct Jail {
    root: PathBuf,
    binds: Vec<Bind>,
    files: Vec<PathBuf>,
}

/// One step of building the jail's root, in order.
#[derive(Debug)]
enum Step {
    Mkdir(CString),
    Symlink {
        target: CString,
        link: CString,
    },
    /// An empty file (to bind a host file onto, or to stay empty).
    File(CString),
    Bind {
        source: CString,
        target: CString,
        flags: libc::c_ulong,
    },
}

/// A [`Jail`] turned into C strings and steps, for the child to apply.
#[derive(Debug)]
pub struct PreparedJail {
    root: CString,
    steps: Vec<Step>,
}

fn c_path(path: &Path) -> Result<CString, ConfineError> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| ConfineError::JailPath {
        path: path.to_path_buf(),
        why: "a path with a NUL byte",
    })
}

impl Jail {
    /// A jail whose root is mounted on `root`, an empty host directory.
    pub fn new(root: impl Into<PathBuf>) -> Jail {
        Jail {
            root: root.into(),
            binds: Vec::new(),
            files: Vec::new(),
        }
    }

    /// Binds `host` at its own path.
    pub fn bind(&mut self, host: impl Into<PathBuf>, access: Access) -> &mut Jail {
        let host = host.into();
        self.bind_at(host.clone(), host, access)
    }

    /// Binds `host` at `inside` (an absolute path in the jail).
    pub fn bind_at(
        &mut self,
        host: impl Into<PathBuf>,
        inside: impl Into<PathBuf>,
        access: Access,
    ) -> &mut Jail {
        self.binds.push(Bind {
            host: host.into(),
            inside: inside.into(),
            access,
        });
        self
    }

    /// Leaves an empty read-only file at `inside` (an empty `/etc/mtab`, say).
    pub fn empty_file(&mut self, inside: impl Into<PathBuf>) -> &mut Jail {
        self.files.push(inside.into());
        self
    }

    /// Computes every step (and checks the paths) before the fork.
    pub fn prepare(&self) -> Result<PreparedJail, ConfineError> {
        let mut plan = Plan {
            root: &self.root,
            steps: Vec::new(),
            made: BTreeSet::new(),
        };
        let usr = Bind {
            host: "/usr".into(),
            inside: "/usr".into(),
            access: Access::Exec,
        };
        let mut binds = vec![usr];
        for name in SYSTEM_DIRS {
            let host = Path::new("/").join(name);
            match std::fs::symlink_metadata(&host) {
                Ok(meta) if meta.file_type().is_symlink() => {
                    let target = std::fs::read_link(&host).map_err(|source| ConfineError::Io {
                        action: "read the link",
                        path: host.clone(),
                        source,
                    })?;
                    plan.steps.push(Step::Symlink {
                        target: c_path(&target)?,
                        link: c_path(&plan.inside(&host))?,
                    });
                }
                Ok(meta) if meta.is_dir() => binds.push(Bind {
                    inside: host.clone(),
                    host,
                    access: Access::Exec,
                }),
                _ => {}
            }
        }
        for bind in &self.binds {
            // Already there read-only through `/usr` (a program in /usr/local/bin).
            let covered = bind.inside == bind.host
                && matches!(bind.access, Access::ReadOnly | Access::Exec)
                && binds
                    .iter()
                    .any(|b| b.access == Access::Exec && bind.host.starts_with(&b.host));
            if !covered {
                binds.push(bind.clone());
            }
        }
        for bind in binds {
            plan.bind(bind)?;
        }
        for file in &self.files {
            absolute(file)?;
            if let Some(parent) = file.parent() {
                plan.mkdirs(parent)?;
            }
            let step = Step::File(c_path(&plan.inside(file))?);
            plan.steps.push(step);
        }
        Ok(PreparedJail {
            root: c_path(&self.root)?,
            steps: plan.steps,
        })
    }
}

fn absolute(path: &Path) -> Result<(), ConfineError> {
    if path.is_absolute() {
        Ok(())
    } else {
        Err(ConfineError::JailPath {
            path: path.to_path_buf(),
            why: "not an absolute path",
        })
    }
}

/// The steps being planned, and the directories they make (each once).
struct Plan<'a> {
    root: &'a Path,
    steps: Vec<Step>,
    made: BTreeSet<PathBuf>,
}

impl Plan<'_> {
    /// Where an absolute path in the jail lies under the root, seen from the host.
    fn inside(&self, path: &Path) -> PathBuf {
        self.root.join(path.strip_prefix("/").unwrap_or(path))
    }

    fn mkdirs(&mut self, path: &Path) -> Result<(), ConfineError> {
        let mut at = PathBuf::from("/");
        for part in path.components().skip(1) {
            at.push(part);
            if self.made.insert(at.clone()) {
                let step = Step::Mkdir(c_path(&self.inside(&at))?);
                self.steps.push(step);
            }
        }
        Ok(())
    }

    fn bind(&mut self, bind: Bind) -> Result<(), ConfineError> {
        absolute(&bind.host)?;
        absolute(&bind.inside)?;
        let meta = std::fs::metadata(&bind.host).map_err(|source| ConfineError::Io {
            action: "stat for a jail",
            path: bind.host.clone(),
            source,
        })?;
        let target = c_path(&self.inside(&bind.inside))?;
        if let Some(parent) = bind.inside.parent() {
            self.mkdirs(parent)?;
        }
        if meta.is_dir() {
            self.mkdirs(&bind.inside)?;
        } else {
            self.steps.push(Step::File(target.clone()));
        }
        self.steps.push(Step::Bind {
            source: c_path(&bind.host)?,
            target,
            flags: bind.access.remount_flags(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests;
