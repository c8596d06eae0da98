//! Every host tool that parses a box volume image (e2fsck, resize2fs, e2undo) runs here,
//! confined: a box's guest root may have written any bytes into that image, so the tool's
//! parser is attack surface and must not act as host root.
//!
//! The child, between fork and exec:
//! - its own mount namespace whose root (after `pivot_root`) is an empty read-only
//!   directory holding only the host's `/usr` (read-only: the tool and its libraries, with
//!   the merged-usr links), `/dev/null`, an empty `/etc/mtab` and the files it works on, each bound alone (read-only unless
//!   the step must write);
//! - resource limits: address space ([`Limits::memory_bytes`]), CPU time, no core, few
//!   files; the parent kills it at [`Limits::deadline`];
//! - an empty bounding set, no supplementary groups, then uid/gid [`TOOL_UID`] (which
//!   clears every capability), `no_new_privs`;
//! - a seccomp filter refusing (`EPERM`) mounts, namespaces, ptrace, sockets, module and
//!   kexec loading, bpf, keyrings, io_uring, new processes, id changes and changes to a
//!   file's mode, owner or xattrs: e2fsprogs needs file I/O only.
//!
//! The files it needs are lent to [`TOOL_UID`] for the run and given back after (to
//! berth's ids, with their modes).
//! Without root (a test or an unprivileged builder) there is nothing to drop: the tool
//! runs with the limits, `no_new_privs` and the filter only.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, SeccompRule, TargetArch};

use crate::error::io;
use crate::tool::Tool;
use crate::ImageError;

/// The uid and gid a confined tool runs as: below every box's id range (which start at
/// 2^20) and used by nothing else.
pub const TOOL_UID: u32 = (1 << 20) - 2;

/// How much of a tool's stdout and stderr is kept (the end: a hostile image can make
/// e2fsck print without end).
const OUTPUT_TAIL: usize = 16 * 1024;

/// The host's top-level entries a dynamically linked tool may need (merged-usr links, or
/// directories bound read-only when a host has them as directories).
const SYSTEM_DIRS: &[&str] = &["bin", "sbin", "lib", "lib64", "lib32", "libx32"];

/// What a confined tool may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Its address space (`RLIMIT_AS`): e2fsck allocates bitmaps from the counts in the
    /// superblock, which a guest chose.
    pub memory_bytes: u64,
    /// Wall-clock time after which it is killed.
    pub deadline: Duration,
}

impl Limits {
    /// For a tool working on a volume image of `image_bytes`: 256 MiB plus 1/64 of the image
    /// (e2fsck's bitmaps and tables grow with the file system), and 60 s plus 1 s per GiB.
    pub fn for_image(image_bytes: u64) -> Limits {
        Limits {
            memory_bytes: (256 << 20) + image_bytes / 64,
            deadline: Duration::from_secs(60 + (image_bytes >> 30)),
        }
    }
}

/// A file the tool works on: `host` appears as `/<name>` in its root.
#[derive(Debug, Clone)]
pub struct Bind {
    pub host: PathBuf,
    pub name: &'static str,
    pub writable: bool,
}

impl Bind {
    pub fn read_only(host: &Path, name: &'static str) -> Bind {
        Bind {
            host: host.into(),
            name,
            writable: false,
        }
    }

    pub fn writable(host: &Path, name: &'static str) -> Bind {
        Bind {
            host: host.into(),
            name,
            writable: true,
        }
    }
}

/// What a confined tool did: its exit status and the end of what it printed.
#[derive(Debug)]
pub struct ToolOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl ToolOutput {
    /// stdout then stderr, trimmed, on one line (for a report or an error).
    pub fn report(&self) -> String {
        format!("{}\n{}", self.stdout.trim(), self.stderr.trim())
            .trim()
            .replace('\n', " | ")
    }
}

/// Runs `tool` with `args` confined (see the module doc), the `binds` its only files.
/// Arguments name those files by their inside path (`/<name>`). Errors when it cannot be
/// confined, cannot start, or outlives `limits.deadline` ([`ImageError::TookTooLong`]); a
/// tool that ran is returned whatever its exit status.
pub fn run(
    tool: Tool,
    args: &[&OsStr],
    binds: &[Bind],
    limits: Limits,
) -> Result<ToolOutput, ImageError> {
    let program = tool.locate()?;
    let program = std::fs::canonicalize(&program).map_err(io("resolve", &program))?;
    let mut cmd = Command::new(&program);
    cmd.args(args)
        .env_clear()
        .env("LC_ALL", "C")
        .env("PATH", "/usr/sbin:/usr/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let filter = filter()?;
    let rlimits = rlimits(limits);
    // SAFETY: geteuid has no arguments and cannot fail.
    let jail = if unsafe { libc::geteuid() } == 0 {
        Some(Jail::prepare(&program, binds)?)
    } else {
        None
    };
    let child_jail = jail.as_ref().map(Jail::plan).transpose()?;
    let cap_last = cap_last_cap();
    // SAFETY: the closure runs in the forked child before exec and only makes system
    // calls on memory prepared above (no allocation, no locks).
    unsafe {
        cmd.pre_exec(move || {
            if let Some(plan) = &child_jail {
                plan.enter()?;
            }
            for (resource, value) in &rlimits {
                let lim = libc::rlimit {
                    rlim_cur: *value,
                    rlim_max: *value,
                };
                check(libc::setrlimit(*resource, &lim))?;
            }
            if child_jail.is_some() {
                drop_privileges(cap_last)?;
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            check(libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ))?;
            Ok(())
        });
    }
    let result = spawn_and_wait(tool, &mut cmd, limits.deadline);
    drop(jail);
    result
}

/// Spawns `cmd`, keeps the tail of its output, and kills it at `deadline`.
fn spawn_and_wait(
    tool: Tool,
    cmd: &mut Command,
    deadline: Duration,
) -> Result<ToolOutput, ImageError> {
    let mut child = cmd.spawn().map_err(|source| ImageError::Spawn {
        tool: tool.name,
        source,
    })?;
    let stdout = tail_reader(child.stdout.take().expect("stdout is piped"));
    let stderr = tail_reader(child.stderr.take().expect("stderr is piped"));
    let pid = child.id() as libc::pid_t;
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    let waited = match finished.recv_timeout(deadline) {
        Ok(status) => Ok(status),
        Err(_) => {
            // SAFETY: kill on our own child, not yet reaped (the waiter reaps it only once
            // it is gone), so the pid is still its.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = finished.recv();
            Err(ImageError::TookTooLong {
                tool: tool.name,
                after: deadline,
            })
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let status = waited?.map_err(|source| ImageError::Spawn {
        tool: tool.name,
        source,
    })?;
    Ok(ToolOutput {
        status,
        stdout,
        stderr,
    })
}

/// Reads `pipe` to its end on a thread, keeping its last [`OUTPUT_TAIL`] bytes.
fn tail_reader(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        while let Ok(n) = pipe.read(&mut buf) {
            if n == 0 {
                break;
            }
            kept.extend_from_slice(&buf[..n]);
            if kept.len() > 2 * OUTPUT_TAIL {
                kept.drain(..kept.len() - OUTPUT_TAIL);
            }
        }
        let start = kept.len().saturating_sub(OUTPUT_TAIL);
        String::from_utf8_lossy(&kept[start..]).into_owned()
    })
}

/// The empty root a tool runs in, made by the parent; removed, and the files given back
/// to berth with their modes, on drop.
struct Jail {
    root: tempfile::TempDir,
    binds: Vec<(Bind, PathBuf)>,
    /// Each file lent to the tool, with its permission bits before the run.
    lent: Vec<(PathBuf, u32)>,
}

impl Jail {
    fn prepare(program: &Path, binds: &[Bind]) -> Result<Jail, ImageError> {
        if !program.starts_with("/usr") {
            return Err(ImageError::Invalid {
                what: "confined tool",
                value: program.display().to_string(),
                why: "a confined tool must live under /usr (its root holds only /usr)",
            });
        }
        let root = tempfile::Builder::new()
            .prefix("berth-tool-")
            .tempdir()
            .map_err(io("create a root for a tool in", &std::env::temp_dir()))?;
        let dir = root.path();
        set_mode(dir, 0o755)?;
        mkdir(&dir.join("usr"))?;
        for name in SYSTEM_DIRS {
            let host = Path::new("/").join(name);
            let Ok(meta) = std::fs::symlink_metadata(&host) else {
                continue;
            };
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&host).map_err(io("read the link", &host))?;
                let at = dir.join(name);
                std::os::unix::fs::symlink(&target, &at).map_err(io("link", &at))?;
            } else if meta.is_dir() {
                mkdir(&dir.join(name))?;
            }
        }
        // /dev/null alone (some tools open it); nothing else of /dev.
        mkdir(&dir.join("dev"))?;
        let null = dir.join("dev/null");
        std::fs::File::create(&null).map_err(io("create", &null))?;
        // An empty mount table: e2fsprogs refuses to work on a file it cannot tell is not
        // mounted (and nothing is mounted in here).
        mkdir(&dir.join("etc"))?;
        let mtab = dir.join("etc/mtab");
        std::fs::File::create(&mtab).map_err(io("create", &mtab))?;
        let mut jail = Jail {
            root,
            binds: Vec::new(),
            lent: Vec::new(),
        };
        for bind in binds {
            let meta = std::fs::metadata(&bind.host).map_err(io("stat", &bind.host))?;
            let inside = jail.root.path().join(bind.name);
            std::fs::File::create(&inside).map_err(io("create", &inside))?;
            jail.lent.push((bind.host.clone(), meta.mode() & 0o777));
            std::os::unix::fs::chown(&bind.host, Some(TOOL_UID), Some(TOOL_UID))
                .map_err(io("lend (chown) to the confined tool", &bind.host))?;
            jail.binds.push((bind.clone(), inside));
        }
        Ok(jail)
    }

    /// The child's steps, as C strings made before the fork.
    fn plan(&self) -> Result<JailPlan, ImageError> {
        let c = |p: &Path| {
            CString::new(p.as_os_str().as_bytes()).map_err(|_| ImageError::Invalid {
                what: "path",
                value: p.display().to_string(),
                why: "no NUL bytes",
            })
        };
        let root = self.root.path();
        let files = libc::MS_NOSUID | libc::MS_NODEV;
        let read_only = files | libc::MS_RDONLY;
        let mut binds = vec![
            (c(Path::new("/usr"))?, c(&root.join("usr"))?, read_only),
            (
                c(Path::new("/dev/null"))?,
                c(&root.join("dev/null"))?,
                libc::MS_NOSUID,
            ),
        ];
        for name in SYSTEM_DIRS {
            if root.join(name).is_dir() && !root.join(name).is_symlink() {
                binds.push((
                    c(&Path::new("/").join(name))?,
                    c(&root.join(name))?,
                    read_only,
                ));
            }
        }
        for (bind, inside) in &self.binds {
            let flags = if bind.writable { files } else { read_only };
            binds.push((c(&bind.host)?, c(inside)?, flags));
        }
        Ok(JailPlan {
            root: c(root)?,
            binds,
            slash: c(Path::new("/"))?,
            dot: c(Path::new("."))?,
        })
    }
}

impl Drop for Jail {
    fn drop(&mut self) {
        // To berth's own ids (not the owner seen before the run, which a daemon killed
        // mid-run would have left as the tool's), with the mode it had: the tool cannot
        // change the mode or xattrs itself (seccomp), this is for certainty.
        // SAFETY: geteuid and getegid have no arguments and cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        for (path, mode) in &self.lent {
            let back = std::os::unix::fs::chown(path, Some(uid), Some(gid)).and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
            });
            if let Err(e) = back {
                eprintln!(
                    "berth: could not give {} back to {uid}:{gid}: {e}",
                    path.display()
                );
            }
        }
    }
}

/// What the child does to enter its jail: only system calls on these strings.
struct JailPlan {
    root: CString,
    /// (host path, path in the new root, flags of its read-only/nosuid/nodev remount)
    binds: Vec<(CString, CString, libc::c_ulong)>,
    slash: CString,
    dot: CString,
}

impl JailPlan {
    /// In the child: a private mount namespace whose root is the jail.
    fn enter(&self) -> std::io::Result<()> {
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY: each call takes NUL-terminated strings made before the fork, or null.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                null,
                self.slash.as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            // A mount of its own, so it can be the new root.
            check(libc::mount(
                self.root.as_ptr(),
                self.root.as_ptr(),
                null,
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
            for (host, inside, flags) in &self.binds {
                check(libc::mount(
                    host.as_ptr(),
                    inside.as_ptr(),
                    null,
                    libc::MS_BIND,
                    std::ptr::null(),
                ))?;
                check(libc::mount(
                    null,
                    inside.as_ptr(),
                    null,
                    libc::MS_BIND | libc::MS_REMOUNT | flags,
                    std::ptr::null(),
                ))?;
            }
            check(libc::chdir(self.root.as_ptr()))?;
            // pivot_root(".", "."): the old root ends up over the new one; detaching it
            // leaves the jail the only thing this namespace holds.
            check(
                libc::syscall(libc::SYS_pivot_root, self.dot.as_ptr(), self.dot.as_ptr()) as i32,
            )?;
            check(libc::umount2(self.dot.as_ptr(), libc::MNT_DETACH))?;
            check(libc::chdir(self.slash.as_ptr()))?;
            check(libc::mount(
                null,
                self.slash.as_ptr(),
                null,
                libc::MS_BIND
                    | libc::MS_REMOUNT
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV,
                std::ptr::null(),
            ))?;
        }
        Ok(())
    }
}

/// In the child: an empty bounding set, no groups, then [`TOOL_UID`] (the kernel clears
/// the permitted and effective sets at the uid change), no ambient capabilities.
fn drop_privileges(cap_last: libc::c_ulong) -> std::io::Result<()> {
    // SAFETY: prctl and the set*id calls take integers only.
    unsafe {
        for cap in 0..=cap_last {
            check(libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
        }
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        ))?;
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setresgid(TOOL_UID, TOOL_UID, TOOL_UID))?;
        check(libc::setresuid(TOOL_UID, TOOL_UID, TOOL_UID))?;
    }
    Ok(())
}

/// The highest capability number this kernel knows.
fn cap_last_cap() -> libc::c_ulong {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(63)
}

fn rlimits(limits: Limits) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
    vec![
        (libc::RLIMIT_AS, limits.memory_bytes),
        (libc::RLIMIT_CPU, limits.deadline.as_secs() + 1),
        (libc::RLIMIT_CORE, 0),
        (libc::RLIMIT_NOFILE, 64),
    ]
}

fn check(rc: libc::c_int) -> std::io::Result<()> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// `fchmodat2` (Linux 6.6): 452 on every architecture (new system calls share one number
/// from 424 on), and not yet in the `libc` crate for all of them.
const SYS_FCHMODAT2: libc::c_long = 452;

/// System calls a file system tool never needs: refused with `EPERM`.
const DENIED: &[libc::c_long] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_fsopen,
    libc::SYS_fsconfig,
    libc::SYS_fsmount,
    libc::SYS_fspick,
    libc::SYS_move_mount,
    libc::SYS_open_tree,
    libc::SYS_mount_setattr,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_pidfd_getfd,
    libc::SYS_socket,
    libc::SYS_socketpair,
    libc::SYS_connect,
    libc::SYS_bind,
    libc::SYS_listen,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_clone,
    libc::SYS_clone3,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_syslog,
    libc::SYS_acct,
    libc::SYS_quotactl,
    libc::SYS_setuid,
    libc::SYS_setgid,
    libc::SYS_setreuid,
    libc::SYS_setregid,
    libc::SYS_setresuid,
    libc::SYS_setresgid,
    libc::SYS_setgroups,
    libc::SYS_capset,
    libc::SYS_mknodat,
    // The files it is lent stay as berth made them: no mode, owner or xattr changes.
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    SYS_FCHMODAT2,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
    libc::SYS_adjtimex,
    libc::SYS_sethostname,
    libc::SYS_setdomainname,
    libc::SYS_vhangup,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_fork,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_vfork,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_mknod,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_ioperm,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_iopl,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_uselib,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_chmod,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_chown,
    #[cfg(target_arch = "x86_64")]
    libc::SYS_lchown,
];

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Set in the number of an x32-ABI system call (which passes the x86_64 arch check).
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: libc::c_long = 0x4000_0000;

/// The compiled filter: [`DENIED`] (and, on x86_64, their x32 numbers) → `EPERM`; the rest
/// allowed.
fn filter() -> Result<BpfProgram, ImageError> {
    let numbers = DENIED.iter().flat_map(|&nr| {
        #[cfg(target_arch = "x86_64")]
        return [nr, nr | X32_SYSCALL_BIT];
        #[cfg(not(target_arch = "x86_64"))]
        return [nr];
    });
    let rules: BTreeMap<i64, Vec<SeccompRule>> = numbers.map(|nr| (nr, Vec::new())).collect();
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(|source| ImageError::Seccomp { source })?;
    filter
        .try_into()
        .map_err(|source| ImageError::Seccomp { source })
}

fn mkdir(path: &Path) -> Result<(), ImageError> {
    std::fs::create_dir(path).map_err(io("create the directory", path))?;
    set_mode(path, 0o755)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), ImageError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io("chmod", path))
}

/// `/<name>` as an argument.
pub fn inside(name: &str) -> OsString {
    OsString::from(format!("/{name}"))
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::tool::E2FSCK;

    fn skip() -> bool {
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            berth_testkit::skip("root", "confining a tool needs root");
            return true;
        }
        if E2FSCK.locate().is_err() {
            berth_testkit::skip("e2fsprogs", "e2fsck is not installed");
            return true;
        }
        false
    }

    /// A FIFO as the "image": e2fsck blocks opening it until someone writes.
    fn stalling_image(dir: &Path) -> PathBuf {
        let fifo = dir.join("stall");
        let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        fifo
    }

    /// The confined child of this process running `comm` with `arg` on its command line
    /// (tests of this crate run concurrently in one process under `cargo test`, each with
    /// confined children of its own: the name alone could find another test's), once it is
    /// there; looked for at least once.
    fn wait_for_child(comm: &str, arg: &str, within: Duration) -> Option<u32> {
        let started = Instant::now();
        loop {
            if let Some(pid) = child_running(comm, arg) {
                return Some(pid);
            }
            if started.elapsed() >= within {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn child_running(comm: &str, arg: &str) -> Option<u32> {
        let me = std::process::id().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .find_map(|entry| {
                let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                // pid (comm) state ppid ...
                let (head, rest) = stat.rsplit_once(") ")?;
                let ppid = rest.split(' ').nth(1)?;
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                let has_arg = cmdline
                    .split(|&b| b == 0)
                    .any(|a| String::from_utf8_lossy(a).contains(arg));
                (head.ends_with(&format!("({comm}")) && ppid == me && has_arg)
                    .then(|| entry.file_name().to_str()?.parse().ok())
                    .flatten()
            })
    }

    fn status_field(status: &str, key: &str) -> String {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no {key} in {status}"))
            .trim()
            .to_string()
    }

    /// The confined e2fsck has no capability at all, not even in its bounding set, runs as
    /// the tool uid with no_new_privs and a seccomp filter, in a mount namespace whose root
    /// holds only /usr, the merged-usr links and its one file.
    #[test]
    fn a_confined_tool_has_no_capabilities_seccomp_and_only_its_file() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = stalling_image(dir.path());
        let fifo_c = fifo.clone();
        let runner = std::thread::spawn(move || {
            run(
                E2FSCK,
                &[OsStr::new("-n"), &inside("caps.ext4")],
                &[Bind::read_only(&fifo_c, "caps.ext4")],
                Limits {
                    memory_bytes: 256 << 20,
                    deadline: Duration::from_secs(120),
                },
            )
        });
        let pid =
            wait_for_child("e2fsck", "caps.ext4", Duration::from_secs(60)).expect("e2fsck started");
        // Wait until it blocks in the FIFO's open (it has exec'd and is in its jail).
        let started = Instant::now();
        let status = loop {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            if status_field(&status, "Seccomp") == "2"
                || started.elapsed() > Duration::from_secs(30)
            {
                break status;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let root: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/root"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).unwrap();
        let own_ns = ns("self");
        let child_ns = ns(&pid.to_string());
        // Unblock it: a writer that closes at once gives e2fsck an empty "device".
        drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
        let out = runner.join().unwrap().unwrap();

        assert_eq!(status_field(&status, "CapEff"), "0000000000000000");
        assert_eq!(status_field(&status, "CapPrm"), "0000000000000000");
        assert_eq!(status_field(&status, "CapBnd"), "0000000000000000");
        assert_eq!(status_field(&status, "CapAmb"), "0000000000000000");
        assert_eq!(status_field(&status, "Seccomp"), "2");
        assert_eq!(status_field(&status, "NoNewPrivs"), "1");
        let uid = status_field(&status, "Uid");
        assert!(
            uid.split_whitespace().all(|u| u == TOOL_UID.to_string()),
            "{uid}"
        );
        assert_eq!(status_field(&status, "Groups"), "");
        assert_ne!(own_ns, child_ns, "its own mount namespace");
        // A superblock can make e2fsck size its tables past any sense: the address-space
        // limit fails its allocation, not the host; CPU time is bounded too.
        let limit = |name: &str| {
            let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
            line[name.len()..]
                .split_whitespace()
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(limit("Max address space"), (256u64 << 20).to_string());
        assert_eq!(limit("Max cpu time"), "121");
        assert_eq!(limit("Max core file size"), "0");
        let mut root = root;
        root.sort();
        let mut expected: Vec<String> = ["dev", "etc", "usr", "caps.ext4"]
            .map(String::from)
            .to_vec();
        for name in SYSTEM_DIRS {
            if Path::new("/").join(name).exists() {
                expected.push(name.to_string());
            }
        }
        expected.sort();
        assert_eq!(root, expected);
        assert!(
            !out.status.success(),
            "an empty device is no file system: {out:?}"
        );
        // The FIFO is given back to its owner.
        assert_eq!(std::fs::metadata(&fifo).unwrap().uid(), 0);
    }

    /// A tool that stalls is killed at its deadline, and the caller hears why.
    #[test]
    fn a_stalled_tool_is_killed_at_its_deadline() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fifo = stalling_image(dir.path());
        let started = Instant::now();
        let err = run(
            E2FSCK,
            &[OsStr::new("-n"), &inside("stalled.ext4")],
            &[Bind::read_only(&fifo, "stalled.ext4")],
            Limits {
                memory_bytes: 256 << 20,
                deadline: Duration::from_secs(2),
            },
        )
        .unwrap_err();
        assert!(matches!(err, ImageError::TookTooLong { .. }), "{err}");
        assert!(err.to_string().contains("took too long"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(30));
        assert!(
            wait_for_child("e2fsck", "stalled.ext4", Duration::ZERO).is_none(),
            "no e2fsck is left"
        );
    }

    /// Inside, what a hostile image could make a tool attempt fails: sockets, new
    /// processes, writing its read-only file, writing anywhere else, regaining root;
    /// reading the file it was given works. (perl from /usr plays the subverted tool.)
    #[test]
    fn a_subverted_tool_can_only_read_its_file() {
        const PERL: Tool = Tool {
            name: "perl",
            package: "perl-base",
        };
        if skip() {
            return;
        }
        if !PERL.locate().is_ok_and(|p| p.starts_with("/usr")) {
            berth_testkit::skip("perl", "no perl under /usr plays the subverted tool");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data");
        std::fs::write(&file, "the image\n").unwrap();
        let rw = dir.path().join("rw");
        std::fs::write(&rw, "").unwrap();
        let script = r#"
use Socket; use POSIX ();
sub attempt { my ($n, $f) = @_; if ($f->()) { print "$n ALLOWED\n" } else { print "$n refused\n" } }
attempt("inet", sub { socket(my $s, PF_INET, SOCK_STREAM, 0) });
attempt("unix", sub { socket(my $s, PF_UNIX, SOCK_STREAM, 0) });
attempt("fork", sub { my $p = fork(); POSIX::_exit(0) if defined $p && $p == 0; defined $p });
attempt("write-given", sub { open(my $f, ">>", "/data") });
attempt("write-root", sub { open(my $f, ">", "/planted") });
attempt("setuid", sub { defined POSIX::setuid(0) });
attempt("chmod", sub { chmod(0666, "/rw") });
open(my $f, "<", "/data") or die; print "read ", scalar(<$f>);
"#;
        let out = run(
            PERL,
            &[OsStr::new("-e"), OsStr::new(script)],
            &[Bind::read_only(&file, "data"), Bind::writable(&rw, "rw")],
            Limits {
                memory_bytes: 512 << 20,
                deadline: Duration::from_secs(60),
            },
        )
        .unwrap();
        assert!(out.status.success(), "{out:?}");
        for name in [
            "inet",
            "unix",
            "fork",
            "write-given",
            "write-root",
            "setuid",
            "chmod",
        ] {
            assert!(
                out.stdout.contains(&format!("{name} refused")),
                "{name}: {}",
                out.stdout
            );
        }
        assert!(out.stdout.contains("read the image"), "{}", out.stdout);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "the image\n");
        let rw = std::fs::metadata(&rw).unwrap();
        assert_eq!(
            (rw.uid(), rw.mode() & 0o777),
            (0, 0o644),
            "given back as it was"
        );
    }
}
