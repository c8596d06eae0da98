//! The box's own cgroup: every process `berth-init` starts for the box joins it between
//! fork and exec, and it holds the box's limits, while `berth-init` stays outside it. A
//! fork bomb or a memory hog in the box then fills the box's cgroup and nothing else:
//! `berth-init` can still fork (moving a process into a cgroup is not limited by its
//! `pids.max`, only forking inside it is), answer exec and file calls, and stop the box.
//!
//! Made in a cgroup directory `berth-init` holds open ([`split_v2`], [`split_v1`]): a VM's
//! own cgroup2 root ([`crate::vm`]), or the sandbox's container cgroup, which the host
//! delegates to it ([`crate::sandbox_cgroup`]). Once made, `berth-init` keeps only the box
//! cgroup's open `cgroup.procs` files ([`BoxCgroup`]); the box sees its cgroups through a
//! read-only mount and cannot reach `berth-init`'s descriptors (it is non-dumpable), so
//! neither the box user nor box root can move out of the box's cgroup or lift its limits.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{mkdirat, Mode};

/// The box's cgroup, a child of the directory it is made in.
pub const BOX_CGROUP: &str = "box";
/// Where cgroup2's no-internal-process rule puts `berth-init` in a delegated cgroup: its
/// children can only have controllers when it holds no process itself.
pub const INIT_CGROUP: &str = "init";
/// The largest `pids.max` the kernel takes (`PID_MAX_LIMIT` on 64-bit); more is `max`.
const PID_MAX_LIMIT: u64 = 4 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot make the cgroup {name}")]
    Dir {
        name: &'static str,
        #[source]
        source: nix::Error,
    },
    #[error("cannot write {value:?} to {file}")]
    Write {
        file: String,
        value: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot open {file}")]
    Open {
        file: String,
        #[source]
        source: nix::Error,
    },
    #[error("cannot make or open {path}")]
    Path {
        path: std::path::PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot mount cgroup2 on {path} (does the kernel have cgroup v2?)")]
    Mount {
        path: std::path::PathBuf,
        #[source]
        source: nix::Error,
    },
}

/// The box's limits; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BoxLimits {
    pub pids_max: Option<u64>,
    pub memory_max_bytes: Option<u64>,
}

/// The box's cgroup, as `berth-init` holds it: its `cgroup.procs`, open for writing, in
/// each hierarchy that holds a limit (one with cgroup2, `pids` and `memory` with v1).
#[derive(Debug)]
pub struct BoxCgroup {
    procs: Vec<OwnedFd>,
}

impl BoxCgroup {
    pub fn new(procs: Vec<OwnedFd>) -> Option<BoxCgroup> {
        (!procs.is_empty()).then_some(BoxCgroup { procs })
    }

    /// Moves the calling process into the box's cgroup. Runs in a child between fork and
    /// exec (async-signal-safe: one `write` per hierarchy), before the child drops root.
    /// The open files are close-on-exec, so the program never holds them.
    pub fn join_from_child(&self) -> io::Result<()> {
        for procs in &self.procs {
            // "0" is the writing process itself.
            // SAFETY: a valid fd and a 1-byte static buffer.
            let n = unsafe { libc::write(procs.as_raw_fd(), b"0".as_ptr().cast(), 1) };
            if n != 1 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

/// In a cgroup2 directory `root`: the box's cgroup with the `pids` and `memory` controllers
/// and `limits`. With `leave_root`, `berth-init` first moves itself into [`INIT_CGROUP`]
/// (a delegated cgroup; the real root cgroup of a VM is exempt from the rule). Returns the
/// box cgroup's `cgroup.procs`.
pub fn split_v2(
    root: &OwnedFd,
    limits: BoxLimits,
    leave_root: bool,
) -> Result<OwnedFd, CgroupError> {
    if leave_root {
        make_dir(root, INIT_CGROUP)?;
        write_at(root, "init/cgroup.procs", "0")?;
    }
    make_dir(root, BOX_CGROUP)?;
    let available = read_at(root, "cgroup.controllers").unwrap_or_default();
    let wanted: Vec<&str> = ["pids", "memory"]
        .into_iter()
        .filter(|c| available.split_whitespace().any(|a| a == *c) || available.is_empty())
        .filter(|c| *c == "pids" || limits.memory_max_bytes.is_some())
        .collect();
    let enable: Vec<String> = wanted.iter().map(|c| format!("+{c}")).collect();
    write_at(root, "cgroup.subtree_control", &enable.join(" "))?;
    if wanted.contains(&"pids") {
        write_at(root, "box/pids.max", &pids_max_text(limits.pids_max))?;
    }
    if let (true, Some(bytes)) = (wanted.contains(&"memory"), limits.memory_max_bytes) {
        write_at(root, "box/memory.max", &bytes.to_string())?;
        // No swap, as for the container (memory + swap = memory); absent without swap
        // accounting.
        let _ = write_at(root, "box/memory.swap.max", "0");
    }
    open_procs(root)
}

/// In a cgroup v1 directory `dir` of the `pids` or the `memory` hierarchy: the box's
/// cgroup with that hierarchy's limit. `None` for any other hierarchy (nothing to limit).
pub fn split_v1(dir: &OwnedFd, limits: BoxLimits) -> Result<Option<OwnedFd>, CgroupError> {
    let has = |file: &str| {
        nix::unistd::faccessat(
            Some(dir.as_raw_fd()),
            file,
            nix::unistd::AccessFlags::F_OK,
            nix::fcntl::AtFlags::empty(),
        )
        .is_ok()
    };
    let (pids, memory) = (has("pids.max"), has("memory.limit_in_bytes"));
    if !pids && !memory {
        return Ok(None);
    }
    make_dir(dir, BOX_CGROUP)?;
    if pids {
        write_at(dir, "box/pids.max", &pids_max_text(limits.pids_max))?;
    }
    if let (true, Some(bytes)) = (memory, limits.memory_max_bytes) {
        write_at(dir, "box/memory.limit_in_bytes", &bytes.to_string())?;
        // memory + swap = memory; absent without swap accounting.
        if has("memory.memsw.limit_in_bytes") {
            write_at(dir, "box/memory.memsw.limit_in_bytes", &bytes.to_string())?;
        }
    }
    open_procs(dir).map(Some)
}

/// What `pids.max` gets: the limit, or `max` for none (and for 0, which means no limit for
/// a box, as in the OCI spec).
fn pids_max_text(pids_max: Option<u64>) -> String {
    match pids_max {
        Some(n) if n > 0 && n <= PID_MAX_LIMIT => n.to_string(),
        _ => "max".to_owned(),
    }
}

fn make_dir(dir: &OwnedFd, name: &'static str) -> Result<(), CgroupError> {
    match mkdirat(Some(dir.as_raw_fd()), name, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(nix::errno::Errno::EEXIST) => Ok(()),
        Err(source) => Err(CgroupError::Dir { name, source }),
    }
}

fn open_at(dir: &OwnedFd, file: &str, flags: OFlag) -> Result<File, CgroupError> {
    let fd = openat(
        Some(dir.as_raw_fd()),
        file,
        flags | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| CgroupError::Open {
        file: file.to_owned(),
        source,
    })?;
    // SAFETY: `openat` just returned this descriptor, and nothing else owns it.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The box cgroup's `cgroup.procs`, open for writing (close-on-exec).
fn open_procs(dir: &OwnedFd) -> Result<OwnedFd, CgroupError> {
    open_at(dir, "box/cgroup.procs", OFlag::O_WRONLY).map(OwnedFd::from)
}

/// Writes a control file (which exists: cgroupfs files cannot be created).
fn write_at(dir: &OwnedFd, file: &str, value: &str) -> Result<(), CgroupError> {
    let write_error = |source| CgroupError::Write {
        file: file.to_owned(),
        value: value.to_owned(),
        source,
    };
    let mut f = open_at(dir, file, OFlag::O_WRONLY).map_err(|e| match e {
        CgroupError::Open { source, .. } => write_error(source.into()),
        other => other,
    })?;
    f.write_all(value.as_bytes()).map_err(write_error)
}

fn read_at(dir: &OwnedFd, file: &str) -> Option<String> {
    let f = open_at(dir, file, OFlag::O_RDONLY).ok()?;
    io::read_to_string(f).ok()
}

/// One console line with the cause chain.
pub fn warn(what: &str, err: &dyn std::error::Error) {
    let mut line = format!("berth-init: warning: {what}: {err}");
    let mut source = err.source();
    while let Some(cause) = source {
        line.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    eprintln!("{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory shaped like a cgroup root with the given files, the box's cgroup
    /// already made (cgroupfs makes its files; a test directory needs them written).
    fn fake_root(files: &[&str]) -> (tempfile::TempDir, OwnedFd) {
        let root = tempfile::tempdir().unwrap();
        for dir in [BOX_CGROUP, INIT_CGROUP] {
            std::fs::create_dir(root.path().join(dir)).unwrap();
        }
        for file in files {
            std::fs::write(root.path().join(file), "").unwrap();
        }
        let fd = File::open(root.path()).unwrap().into();
        (root, fd)
    }

    fn read(root: &tempfile::TempDir, file: &str) -> String {
        std::fs::read_to_string(root.path().join(file)).unwrap()
    }

    const V2_FILES: &[&str] = &[
        "cgroup.subtree_control",
        "init/cgroup.procs",
        "box/cgroup.procs",
        "box/pids.max",
        "box/memory.max",
        "box/memory.swap.max",
    ];

    #[test]
    fn v2_moves_init_out_enables_the_controllers_and_limits_the_box() {
        let (root, dir) = fake_root(V2_FILES);
        let limits = BoxLimits {
            pids_max: Some(64),
            memory_max_bytes: Some(64 << 20),
        };
        let procs = split_v2(&dir, limits, true).unwrap();
        assert_eq!(read(&root, "init/cgroup.procs"), "0");
        assert_eq!(read(&root, "cgroup.subtree_control"), "+pids +memory");
        assert_eq!(read(&root, "box/pids.max"), "64");
        assert_eq!(read(&root, "box/memory.max"), (64u64 << 20).to_string());
        assert_eq!(read(&root, "box/memory.swap.max"), "0");
        let cgroup = BoxCgroup::new(vec![procs]).unwrap();
        cgroup.join_from_child().unwrap();
        assert_eq!(read(&root, "box/cgroup.procs"), "0");
        // The program a child execs never holds the file.
        let flags = nix::fcntl::fcntl(cgroup.procs[0].as_raw_fd(), nix::fcntl::FcntlArg::F_GETFD);
        assert!(nix::fcntl::FdFlag::from_bits_truncate(flags.unwrap())
            .contains(nix::fcntl::FdFlag::FD_CLOEXEC));
    }

    #[test]
    fn a_vm_root_keeps_init_and_limits_processes_only() {
        let (root, dir) = fake_root(V2_FILES);
        let limits = BoxLimits {
            pids_max: Some(64),
            memory_max_bytes: None,
        };
        split_v2(&dir, limits, false).unwrap();
        assert_eq!(read(&root, "init/cgroup.procs"), "");
        assert_eq!(read(&root, "cgroup.subtree_control"), "+pids");
        assert_eq!(read(&root, "box/memory.max"), "");
    }

    #[test]
    fn v1_limits_the_hierarchy_it_is_given_and_skips_the_others() {
        let (root, dir) = fake_root(&["pids.max", "box/pids.max", "box/cgroup.procs"]);
        let limits = BoxLimits {
            pids_max: None,
            memory_max_bytes: Some(1 << 30),
        };
        assert!(split_v1(&dir, limits).unwrap().is_some());
        assert_eq!(read(&root, "box/pids.max"), "max");
        let memory = [
            "memory.limit_in_bytes",
            "memory.memsw.limit_in_bytes",
            "box/memory.limit_in_bytes",
            "box/memory.memsw.limit_in_bytes",
            "box/cgroup.procs",
        ];
        let (root, dir) = fake_root(&memory);
        assert!(split_v1(&dir, limits).unwrap().is_some());
        assert_eq!(read(&root, "box/memory.limit_in_bytes"), "1073741824");
        assert_eq!(read(&root, "box/memory.memsw.limit_in_bytes"), "1073741824");
        let (_root, dir) = fake_root(&["cpu.shares"]);
        assert!(split_v1(&dir, limits).unwrap().is_none());
    }

    #[test]
    fn no_limit_zero_and_too_large_are_max() {
        assert_eq!(pids_max_text(None), "max");
        assert_eq!(pids_max_text(Some(0)), "max");
        assert_eq!(pids_max_text(Some(1)), "1");
        assert_eq!(pids_max_text(Some(PID_MAX_LIMIT)), "4194304");
        assert_eq!(pids_max_text(Some(PID_MAX_LIMIT + 1)), "max");
    }

    #[test]
    fn a_root_without_the_controls_is_an_error_naming_the_file() {
        // No cgroup.subtree_control: what a directory that is not cgroup2 looks like.
        let (_root, dir) = fake_root(&[]);
        let err = split_v2(&dir, BoxLimits::default(), false).unwrap_err();
        assert!(
            matches!(&err, CgroupError::Write { file, .. } if file == "cgroup.subtree_control"),
            "{err:?}"
        );
        assert!(BoxCgroup::new(Vec::new()).is_none());
    }
}
