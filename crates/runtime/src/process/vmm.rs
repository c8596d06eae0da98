//! The two host processes of a VM (QEMU and its channel bridge): starting them, finding
//! them again from their pid files, signalling exactly them, waiting for and reaping them.
//!
//! A pid read from a file is trusted only after `/proc/<pid>/cmdline` names this VM's
//! directory, and signals go through a pidfd opened before that check, so a recycled pid is
//! never signalled. Both processes are the daemon's children and are reaped through a pidfd
//! (no zombie, and never another child that reuses the pid). They run in their own process
//! group: a Ctrl-C meant for the daemon does not reach the VMs, which outlive a daemon crash
//! (the next daemon finds them through `list`).

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;

use super::{pid_alive, pidfd_open, reap_on_exit, reap_pidfd, wait_exit};
pub(crate) use crate::error::io;
use crate::RuntimeError;

/// A log past this is truncated when the next process opens it.
const LOG_MAX_BYTES: u64 = 8 << 20;
const FIRST_BACKOFF: Duration = Duration::from_millis(1);
const MAX_BACKOFF: Duration = Duration::from_millis(50);
/// How much of a log an error shows.
const TAIL_LINES: usize = 30;

/// What a child runs between fork and exec (`crate::vm::jail`): system calls only.
pub(crate) type PreExec = Box<dyn FnMut() -> std::io::Result<()> + Send + Sync>;

/// How a VMM process ended, as its parent's `waitid` saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmmStatus {
    Exited(i32),
    Killed(i32),
}

/// Keeps how a VMM ended in `record` (`crate::vm::exit` reads it).
pub(crate) fn write_status(record: &Path, status: VmmStatus) -> Result<(), RuntimeError> {
    let text = match status {
        VmmStatus::Exited(code) => format!("exited {code}\n"),
        VmmStatus::Killed(signal) => format!("killed {signal}\n"),
    };
    std::fs::write(record, text).map_err(io("write", record))
}

pub(crate) fn read_status(record: &Path) -> Option<VmmStatus> {
    let text = std::fs::read_to_string(record).ok()?;
    let (kind, number) = text.trim().split_once(' ')?;
    let number = number.parse().ok()?;
    match kind {
        "exited" => Some(VmmStatus::Exited(number)),
        "killed" => Some(VmmStatus::Killed(number)),
        _ => None,
    }
}

/// Starts `program args…` in its own process group, stdout and stderr appended to `log`,
/// running `pre_exec` between fork and exec when given (a VMM's jail). Returns its pid;
/// the caller reaps it ([`crate::process::reap_on_exit`] or [`supervise`]).
pub fn spawn(
    program: &Path,
    args: &[OsString],
    log: &Path,
    pre_exec: Option<PreExec>,
) -> Result<i32, RuntimeError> {
    let out = open_log(log)?;
    let err = out
        .try_clone()
        .map_err(io("duplicate the log handle of", log))?;
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    if let Some(hook) = pre_exec {
        // SAFETY: a `PreExec` only makes system calls on memory it owns (no allocation,
        // no locks), as a pre-exec hook must.
        unsafe { command.pre_exec(hook) };
    }
    let child = command.spawn().map_err(io("start", program))?;
    // Dropping a std Child neither kills nor reaps it: the pidfd reaper does the latter.
    Ok(child.id() as i32)
}

/// [`spawn`], then records the pid in `pid_file`; a child whose pid cannot be recorded is
/// killed at once (nothing could find it later).
pub fn spawn_recorded(
    program: &Path,
    args: &[OsString],
    log: &Path,
    pid_file: &Path,
    pre_exec: Option<PreExec>,
) -> Result<i32, RuntimeError> {
    let pid = spawn(program, args, log, pre_exec)?;
    if let Err(e) = write_pid(pid_file, pid) {
        // SAFETY: kill(2) of our own child, not reaped yet, so the pid is still its.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        reap_on_exit(pid);
        return Err(e);
    }
    Ok(pid)
}

/// Opens a log for appending (truncated first when it has grown past 8 MiB), 0640.
pub fn open_log(path: &Path) -> Result<std::fs::File, RuntimeError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true).mode(0o640);
    if std::fs::metadata(path).is_ok_and(|m| m.len() > LOG_MAX_BYTES) {
        options.append(false).write(true).truncate(true);
    }
    options.open(path).map_err(io("open the log", path))
}

pub fn write_pid(path: &Path, pid: i32) -> Result<(), RuntimeError> {
    std::fs::write(path, format!("{pid}\n")).map_err(io("write the pid file", path))
}

pub fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path)
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|&pid| pid > 0)
}

/// The live process named by `pid_file` if its command line mentions `vm_dir` (it is this
/// VM's, not a process that took over a recycled pid), as a pidfd for signalling it.
pub fn find(pid_file: &Path, vm_dir: &Path) -> Option<VmProcess> {
    let pid = read_pid(pid_file)?;
    // Opened before the check: if the pid is recycled after it, the pidfd still names the
    // process that was checked (now dead), and signals to it go nowhere.
    let pidfd = pidfd_open(pid)?;
    (pid_alive(pid) && cmdline_mentions(pid, vm_dir)).then_some(VmProcess { pid, pidfd })
}

/// Reaps the process named by `pid_file` if it is an exited child of ours (its supervising
/// task may have died with an earlier runtime, and a host init may never reap it).
pub fn reap_exited(pid_file: &Path) {
    if let Some(fd) = read_pid(pid_file).and_then(pidfd_open) {
        reap_pidfd(&fd);
    }
}

/// [`reap_exited`] for a VMM: how it ended goes to `record` ([`write_status`]).
pub fn reap_exited_into(pid_file: &Path, record: &Path) {
    if let Some(fd) = read_pid(pid_file).and_then(pidfd_open) {
        reap_recorded(&fd, record);
    }
}

/// Reaps the exited process behind `pidfd` if it is our child, and writes how it ended to
/// `record`: whoever reaps a VMM (its supervising task, a stop, a status check) keeps its
/// wait status for `Runtime::wait_exit`, which has no other way to learn it.
pub fn reap_recorded(pidfd: &OwnedFd, record: &Path) {
    if let Some(status) = reap_status(pidfd) {
        if let Err(e) = write_status(record, status) {
            tracing::warn!(error = %crate::error_chain(&e), "cannot record how a VMM ended");
        }
    }
}

/// Collects the wait status of the exited child behind `pidfd`; `None` when it is not our
/// child, still runs, or was reaped already.
fn reap_status(pidfd: &OwnedFd) -> Option<VmmStatus> {
    // SAFETY: waitid with P_PIDFD reads only the fd and writes the zeroed siginfo we own;
    // si_pid and si_status read the fields waitid filled for a child event.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PIDFD,
            pidfd.as_raw_fd() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG,
        );
        if rc != 0 || info.si_pid() == 0 {
            return None;
        }
        match info.si_code {
            libc::CLD_EXITED => Some(VmmStatus::Exited(info.si_status())),
            libc::CLD_KILLED | libc::CLD_DUMPED => Some(VmmStatus::Killed(info.si_status())),
            _ => None,
        }
    }
}

/// Whether `pid`'s parent is this process (its wait status will be ours to record).
fn is_our_child(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // `pid (comm) S ppid …`: the parent follows the state after the last ')'.
        stat.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
            .is_some_and(|ppid| ppid == std::process::id())
    })
}

/// One of a VM's processes, pinned by a pidfd.
#[derive(Debug)]
pub struct VmProcess {
    pid: i32,
    pidfd: OwnedFd,
}

impl VmProcess {
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` to exactly this process (never to a later owner of its pid).
    pub fn signal(&self, signal: i32) {
        // SAFETY: pidfd_send_signal takes an fd we own, a signal number, a null siginfo
        // and flags; no memory of ours is written.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.pidfd.as_raw_fd(),
                signal,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            );
        }
    }

    /// Its resident memory (`VmRSS`), guest RAM it touched included.
    pub fn rss_bytes(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()?;
        kib.checked_mul(1024)
    }

    /// Whether it is stopped by a signal (`SIGSTOP`: a paused VM).
    pub fn is_stopped(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid)).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    }

    /// Waits until `is_stopped` is `want` (signals are delivered asynchronously), at most
    /// `timeout`. `true` when it is.
    pub async fn wait_stopped(&self, want: bool, timeout: Duration) -> bool {
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        while self.is_stopped() != want {
            if started.elapsed() >= timeout || !pid_alive(self.pid) {
                return false;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
        true
    }

    /// Waits until it has exited, at most `timeout`. `true` when it is gone. Waits on its
    /// own pidfd, so a recycled pid is never mistaken for it.
    pub async fn wait_exit(&self, timeout: Duration) -> bool {
        let Ok(fd) = self.pidfd.try_clone() else {
            return wait_exit(self.pid, timeout).await;
        };
        // SAFETY: `fd` is an open pidfd that the AsyncFd owns (and closes) for its whole life.
        match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
            // A pidfd turns readable when its process exits.
            Ok(fd) => tokio::time::timeout(timeout, fd.readable()).await.is_ok(),
            Err(_) => wait_exit(self.pid, timeout).await,
        }
    }

    /// Waits, without a deadline, until it has exited (a zombie counts). Cancel-safe.
    pub async fn wait_gone(&self) {
        let Ok(fd) = self.pidfd.try_clone() else {
            while !wait_exit(self.pid, Duration::from_secs(3600)).await {}
            return;
        };
        // SAFETY: `fd` is an open pidfd that the AsyncFd owns (and closes) for its whole life.
        match unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) } {
            // A pidfd turns readable when its process exits.
            Ok(fd) => {
                let _ = fd.readable().await;
            }
            Err(_) => while !wait_exit(self.pid, Duration::from_secs(3600)).await {},
        }
    }

    /// Whether it is a child of this process (checked while it runs).
    pub fn is_child(&self) -> bool {
        is_our_child(self.pid)
    }

    /// Collects its exit status if it has exited and is our child (no zombie is left for
    /// a host init that may never reap it), keeping how it ended in `record`.
    pub fn reap_into(&self, record: &Path) {
        reap_recorded(&self.pidfd, record);
    }

    /// Whether it has exited (a zombie counts), without waiting.
    pub fn has_exited(&self) -> bool {
        self.exited(0)
    }

    /// Whether it exits within `wait_ms` (a zombie counts), blocking the thread that long.
    fn exited(&self, wait_ms: i32) -> bool {
        let mut poll = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll reads and writes exactly the one pollfd we pass.
        unsafe { libc::poll(&mut poll, 1, wait_ms) > 0 }
    }

    /// SIGKILL, then waits for the exit (reaping it if it is our child).
    pub async fn kill(&self, timeout: Duration) -> bool {
        self.signal(libc::SIGKILL);
        let gone = self.wait_exit(timeout).await;
        reap_pidfd(&self.pidfd);
        gone
    }

    /// [`VmProcess::kill`] without a runtime (for Drop guards and emergency shutdown).
    pub fn kill_blocking(&self, timeout: Duration) -> bool {
        self.signal(libc::SIGKILL);
        let gone = self.exited(timeout.as_millis().min(i32::MAX as u128) as i32);
        reap_pidfd(&self.pidfd);
        gone
    }
}

/// Whether the command line of `pid` names `vm_dir` (as given, or with QEMU's `,,`
/// escaping of commas).
fn cmdline_mentions(pid: i32, vm_dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let plain = vm_dir.as_os_str().as_bytes().to_vec();
    let escaped: Vec<u8> = plain
        .iter()
        .flat_map(|&b| if b == b',' { vec![b, b] } else { vec![b] })
        .collect();
    [plain, escaped].iter().any(|needle| {
        let mut needle = needle.clone();
        needle.push(b'/');
        cmdline
            .windows(needle.len())
            .any(|w| w == needle.as_slice())
    })
}

/// Reaps QEMU (`pid`) once it exits, recording how it ended in `exit_record`, and then
/// kills and reaps its channel bridge (`companion`, pidfd opened now): the bridge must
/// not outlive the VM it serves, whether QEMU was stopped, crashed or was killed from
/// outside.
pub fn supervise(pid: i32, companion: Option<i32>, exit_record: &Path) {
    let exit_record = exit_record.to_path_buf();
    let Some(fd) = pidfd_open(pid) else { return };
    let companion = companion.and_then(|c| pidfd_open(c).map(|fd| (c, fd)));
    // SAFETY: `fd` is an open pidfd that the AsyncFd owns (and closes) for its whole life.
    let Ok(fd) = (unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) })
    else {
        return;
    };
    tokio::spawn(async move {
        if fd.readable().await.is_err() {
            return;
        }
        reap_recorded(fd.get_ref(), &exit_record);
        if let Some((pid, pidfd)) = companion {
            let process = VmProcess { pid, pidfd };
            process.kill(Duration::from_secs(5)).await;
        }
    });
}

/// The last lines of a log, for errors a user reads.
pub fn log_tail(path: &Path) -> String {
    log_tail_lines(path, TAIL_LINES)
}

fn log_tail_lines(path: &Path, count: usize) -> String {
    super::log_tail(path, 32 * 1024, count)
        .unwrap_or_else(|| format!("(no log at {})", path.display()))
}

/// The console's last lines without the kernel's stack traces and register dumps, which
/// would push out what berth-init said before a panic.
pub fn console_tail(path: &Path) -> String {
    let tail = log_tail_lines(path, 200);
    let kept: Vec<&str> = tail.lines().filter(|line| !is_trace_noise(line)).collect();
    kept[kept.len().saturating_sub(TAIL_LINES)..].join("\n")
}

pub(crate) fn is_trace_noise(line: &str) -> bool {
    // `[    1.18]  dump_stack_lvl+0x44/0x5c`: a stack frame is indented past the timestamp.
    let body = match line.split_once("] ") {
        Some((stamp, body)) if stamp.starts_with('[') => body,
        _ => line,
    };
    body.starts_with(' ')
        || body.starts_with("Call Trace")
        || body.starts_with("Code: ")
        || body.starts_with("Hardware name")
        || body.starts_with("RIP: ")
        || body.starts_with("RSP: ")
        || body.starts_with("RAX: ")
        || body.starts_with("RDX: ")
        || body.starts_with("RBP: ")
        || body.starts_with("R10: ")
        || body.starts_with("R13: ")
        || body.starts_with("</TASK>")
}

/// Waits for `path` to exist while `pid` lives, at most `timeout`. `Err(true)`: the
/// process died; `Err(false)`: timed out.
pub async fn wait_for_path(path: &Path, pid: i32, timeout: Duration) -> Result<(), bool> {
    let started = Instant::now();
    let mut backoff = FIRST_BACKOFF;
    loop {
        if path.exists() {
            return Ok(());
        }
        if !pid_alive(pid) {
            return Err(true);
        }
        if started.elapsed() >= timeout {
            return Err(false);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn find_trusts_a_pid_file_only_when_the_process_names_the_vm_dir() {
        let dir = tempfile::tempdir().unwrap();
        let vm = dir.path().join("a,b").join("vm");
        std::fs::create_dir_all(&vm).unwrap();
        let log = vm.join("x.log");
        // `sh -c '<loop>' <vm dir>/marker`: the vm dir is in its command line (a loop, so
        // the shell does not exec into a command without it).
        let marker = vm.join("marker");
        let script = "while :; do sleep 0.1; done";
        let args: Vec<OsString> = vec!["-c".into(), script.into(), marker.into()];
        let pid = spawn(Path::new("/bin/sh"), &args, &log, None).unwrap();
        reap_on_exit(pid);
        let pid_file = vm.join("x.pid");
        write_pid(&pid_file, pid).unwrap();
        let other_vm = dir.path().join("other").join("vm");
        assert!(
            find(&pid_file, &other_vm).is_none(),
            "another VM's dir matched"
        );
        let process = find(&pid_file, &vm).expect("its own dir matches");
        assert_eq!(process.pid(), pid);
        // Its own process group.
        assert_eq!(
            nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid)))
                .unwrap()
                .as_raw(),
            pid
        );
        assert!(process.kill(Duration::from_secs(5)).await);
        assert!(!pid_alive(pid));
        assert!(find(&pid_file, &vm).is_none());
    }

    #[tokio::test]
    async fn supervise_kills_the_companion_when_the_main_process_dies() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let main = spawn(Path::new("/bin/sleep"), &["30".into()], &log, None).unwrap();
        let companion = spawn(Path::new("/bin/sleep"), &["30".into()], &log, None).unwrap();
        let record = dir.path().join("vmm.exit");
        supervise(main, Some(companion), &record);
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(main, libc::SIGKILL) };
        assert!(wait_exit(main, Duration::from_secs(5)).await);
        assert!(
            wait_exit(companion, Duration::from_secs(5)).await,
            "the companion outlived it"
        );
        // The supervisor reaped the main process and kept how it ended.
        let started = Instant::now();
        while read_status(&record).is_none() {
            assert!(started.elapsed() < Duration::from_secs(5), "no exit record");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(read_status(&record), Some(VmmStatus::Killed(libc::SIGKILL)));
    }

    #[tokio::test]
    async fn wait_for_path_sees_the_file_or_the_death() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let target = dir.path().join("sock");
        let script = format!("sleep 0.05; touch {}; exec sleep 30", target.display());
        let pid = spawn(
            Path::new("/bin/sh"),
            &["-c".into(), script.into()],
            &log,
            None,
        )
        .unwrap();
        reap_on_exit(pid);
        assert_eq!(
            wait_for_path(&target, pid, Duration::from_secs(10)).await,
            Ok(())
        );
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        assert!(wait_exit(pid, Duration::from_secs(5)).await);
        let never = dir.path().join("never");
        assert_eq!(
            wait_for_path(&never, pid, Duration::from_secs(10)).await,
            Err(true)
        );
    }

    #[test]
    fn console_tail_keeps_what_init_said_before_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("console.log");
        let mut text = String::from("berth-init: disks phase: no config disk\n");
        text.push_str("[    6.09] Kernel panic - not syncing: Attempted to kill init!\n");
        text.push_str("[    6.09] CPU: 0 PID: 1 Comm: berth-init\n[    6.09] Call Trace:\n");
        for i in 0..40 {
            text.push_str(&format!("[    6.10]  frame_{i}+0x44/0x5c\n"));
        }
        text.push_str("[    6.10] RAX: ffffffffffffffda RBX: 0\n[    6.10] </TASK>\n");
        text.push_str("[    6.10] Kernel Offset: 0x1a200000\n");
        std::fs::write(&log, text).unwrap();
        let tail = console_tail(&log);
        assert!(tail.starts_with("berth-init: disks phase"), "{tail}");
        assert!(tail.contains("Kernel panic") && tail.ends_with("Kernel Offset: 0x1a200000"));
        assert!(!tail.contains("frame_") && !tail.contains("RAX"), "{tail}");
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("console.log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&log, text).unwrap();
        let tail = log_tail(&log);
        assert!(tail.ends_with("line 99") && !tail.contains("line 69\n"));
    }
}
