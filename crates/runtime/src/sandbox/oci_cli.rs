//! Driving the OCI runtime's command line (`runc`, `crun`, `runsc` share these verbs):
//! `run -d`, `state`, `kill`, `delete`, `pause`, `resume`, `list`, each with `--root` set to
//! berth's own state dir. Failures carry what the runtime printed on stderr.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use serde::Deserialize;

use crate::RuntimeError;

/// A container's status as the OCI runtime reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OciStatus {
    Creating,
    Created,
    Running,
    Paused,
    Stopped,
}

/// `<runtime> state <id>`, the fields berth reads.
#[derive(Debug, Clone, Deserialize)]
pub struct OciState {
    pub id: String,
    pub status: OciStatus,
    #[serde(default)]
    pub pid: i32,
}

/// One OCI runtime binary with one state dir.
#[derive(Debug, Clone)]
pub struct OciCli {
    program: PathBuf,
    root: PathBuf,
}

impl OciCli {
    pub fn new(program: PathBuf, root: PathBuf) -> OciCli {
        OciCli { program, root }
    }

    pub fn program(&self) -> &Path {
        &self.program
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.program);
        cmd.arg("--root")
            .arg(&self.root)
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// `run -d`: creates and starts the container; its stdout/stderr (and the runtime's
    /// own) go to `console` (opened for append). `pass` reaches the container's init as
    /// descriptors 3 onwards (`--preserve-fds`); the init inherits `oom_score_adj` from the
    /// runtime, which berth starts with it.
    pub async fn run_detached(
        &self,
        id: &str,
        bundle: &Path,
        pid_file: &Path,
        console: std::fs::File,
        pass: Vec<std::os::fd::OwnedFd>,
        oom_score_adj: i32,
    ) -> Result<(), RuntimeError> {
        let err_console = console.try_clone().map_err(|source| RuntimeError::Io {
            action: "duplicate the console log handle of",
            path: bundle.into(),
            source,
        })?;
        let mut cmd = self.command(&["run", "-d", "--pid-file"]);
        cmd.arg(pid_file).arg("--bundle").arg(bundle);
        if !pass.is_empty() {
            cmd.arg("--preserve-fds").arg(pass.len().to_string());
        }
        prepare_child(&mut cmd, pass, oom_score_adj);
        cmd.arg(id);
        cmd.stdout(console).stderr(err_console);
        let status = tokio::process::Command::from(cmd)
            .status()
            .await
            .map_err(|source| self.spawn_error("run", source))?;
        if status.success() {
            Ok(())
        } else {
            Err(RuntimeError::Backend {
                program: self.program_name(),
                operation: "run",
                status: status.to_string(),
                stderr: "see the console log".into(),
            })
        }
    }

    /// `state <id>`; `None` when the runtime knows no such container.
    pub async fn state(&self, id: &str) -> Result<Option<OciState>, RuntimeError> {
        if self.surely_absent(id) {
            return Ok(None);
        }
        let out = self.output("state", &["state", id]).await?;
        parse_state(self, out)
    }

    /// runc and crun keep a container's state in `<root>/<id>/`: without that directory
    /// there is no container, and a start saves spawning the runtime to be told so.
    fn surely_absent(&self, id: &str) -> bool {
        let name = self
            .program
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        matches!(name, "runc" | "crun") && !id.contains('/') && !self.root.join(id).exists()
    }

    /// `kill [--all] <id> <signal>`.
    pub async fn kill(&self, id: &str, signal: &str, all: bool) -> Result<(), RuntimeError> {
        let args: &[&str] = if all {
            &["kill", "--all", id, signal]
        } else {
            &["kill", id, signal]
        };
        self.checked("kill", self.output("kill", args).await?)
    }

    /// `delete --force <id>`: kills what is left and removes the state and cgroups.
    pub async fn delete_force(&self, id: &str) -> Result<(), RuntimeError> {
        self.checked(
            "delete",
            self.output("delete", &["delete", "--force", id]).await?,
        )
    }

    pub async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        self.checked("pause", self.output("pause", &["pause", id]).await?)
    }

    pub async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        self.checked("resume", self.output("resume", &["resume", id]).await?)
    }

    /// `list --format json`: the ids of every container under our root.
    pub async fn list(&self) -> Result<Vec<OciState>, RuntimeError> {
        let out = self.output("list", &["list", "--format", "json"]).await?;
        parse_list(self, out)
    }

    /// The ids of the containers under our root that have not stopped, synchronously (for
    /// `SandboxRuntime::new`, which is not async).
    pub fn live_ids_blocking(&self) -> Result<std::collections::HashSet<String>, RuntimeError> {
        let out = self
            .command(&["list", "--format", "json"])
            .output()
            .map_err(|e| self.spawn_error("list", e))?;
        Ok(parse_list(self, out)?
            .into_iter()
            .filter(|s| s.status != OciStatus::Stopped)
            .map(|s| s.id)
            .collect())
    }

    /// Kills (SIGKILL) and deletes every container under our root, synchronously: for
    /// Drop guards and shutdown paths. Errors are ignored; what is left is returned.
    pub fn kill_all_blocking(&self) -> Vec<String> {
        let Ok(out) = self.command(&["list", "--format", "json"]).output() else {
            return vec![];
        };
        let Ok(states) = parse_list(self, out) else {
            return vec![];
        };
        for state in &states {
            if state.status == OciStatus::Paused {
                let _ = self.command(&["resume", &state.id]).output();
            }
            let _ = self.command(&["kill", "--all", &state.id, "KILL"]).output();
            let _ = self.command(&["delete", "--force", &state.id]).output();
            if state.pid > 0 {
                reap_blocking(state.pid);
            }
        }
        let Ok(out) = self.command(&["list", "--format", "json"]).output() else {
            return vec![];
        };
        parse_list(self, out)
            .map(|l| l.into_iter().map(|s| s.id).collect())
            .unwrap_or_default()
    }

    async fn output(&self, operation: &'static str, args: &[&str]) -> Result<Output, RuntimeError> {
        tokio::process::Command::from(self.command(args))
            .output()
            .await
            .map_err(|source| self.spawn_error(operation, source))
    }

    fn checked(&self, operation: &'static str, out: Output) -> Result<(), RuntimeError> {
        if out.status.success() {
            Ok(())
        } else {
            Err(self.failed(operation, &out))
        }
    }

    fn failed(&self, operation: &'static str, out: &Output) -> RuntimeError {
        RuntimeError::Backend {
            program: self.program_name(),
            operation,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        }
    }

    fn spawn_error(&self, operation: &'static str, source: std::io::Error) -> RuntimeError {
        RuntimeError::Backend {
            program: self.program_name(),
            operation,
            status: "not started".into(),
            stderr: source.to_string(),
        }
    }

    fn program_name(&self) -> String {
        self.program.display().to_string()
    }
}

/// Whether a runtime's error says the container does not exist (runc: "container does
/// not exist", crun: "No such file or directory", runsc: "not found").
pub fn is_not_found(err: &RuntimeError) -> bool {
    match err {
        RuntimeError::Backend { stderr, .. } => {
            let s = stderr.to_ascii_lowercase();
            s.contains("does not exist") || s.contains("no such file") || s.contains("not found")
        }
        _ => false,
    }
}

fn parse_state(cli: &OciCli, out: Output) -> Result<Option<OciState>, RuntimeError> {
    if !out.status.success() {
        let err = cli.failed("state", &out);
        return if is_not_found(&err) {
            Ok(None)
        } else {
            Err(err)
        };
    }
    serde_json::from_slice(&out.stdout)
        .map(Some)
        .map_err(|e| decode_error(cli, "state", e, &out))
}

fn parse_list(cli: &OciCli, out: Output) -> Result<Vec<OciState>, RuntimeError> {
    if !out.status.success() {
        return Err(cli.failed("list", &out));
    }
    // runc prints `null` for an empty list.
    let list: Option<Vec<OciState>> =
        serde_json::from_slice(&out.stdout).map_err(|e| decode_error(cli, "list", e, &out))?;
    Ok(list.unwrap_or_default())
}

fn decode_error(
    cli: &OciCli,
    operation: &'static str,
    e: serde_json::Error,
    out: &Output,
) -> RuntimeError {
    RuntimeError::Backend {
        program: cli.program_name(),
        operation,
        status: format!("unreadable output ({e})"),
        stderr: String::from_utf8_lossy(&out.stdout)
            .chars()
            .take(500)
            .collect(),
    }
}

/// Makes `fds` the child's descriptors 3, 4, … (open across exec; the originals stay
/// close-on-exec and are closed in the parent when the command is dropped), and sets its
/// `oom_score_adj` where host root may (as host root: the box cannot lower it again).
fn prepare_child(
    cmd: &mut std::process::Command,
    fds: Vec<std::os::fd::OwnedFd>,
    oom_score_adj: i32,
) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    /// Above every target: copies here cannot be overwritten by the moves below.
    const PARKED: libc::c_int = 1000;
    let raw: Vec<libc::c_int> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let mut parked = vec![0; raw.len()];
    let score = oom_score_adj.to_string();
    // SAFETY: the closure only makes system calls on integers and buffers allocated
    // before the fork; the OwnedFds stay alive (moved into the closure) until the command
    // is dropped.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &fds;
            let adj = libc::open(
                c"/proc/self/oom_score_adj".as_ptr(),
                libc::O_WRONLY | libc::O_CLOEXEC,
            );
            if adj < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Refused where host root lacks CAP_SYS_RESOURCE (some container hosts): the
            // init then keeps berth's own score, and its cgroup alone shields it.
            let bytes = score.as_bytes();
            libc::write(adj, bytes.as_ptr().cast(), bytes.len());
            libc::close(adj);
            for (slot, &fd) in parked.iter_mut().zip(&raw) {
                *slot = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, PARKED);
                if *slot < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for (target, &fd) in (3..).zip(&parked) {
                if libc::dup2(fd, target) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Reaps a killed box init if it is our child (see `crate::process::reap_on_exit`), waiting at most
/// a second for it to die; not our child: ECHILD at once.
fn reap_blocking(pid: i32) {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let pid = nix::unistd::Pid::from_raw(pid);
    for _ in 0..100 {
        match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => std::thread::sleep(std::time::Duration::from_millis(10)),
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_and_list_parse_runc_output() {
        let s: OciState = serde_json::from_str(
            r#"{"ociVersion":"1.0.2-dev","id":"bx_a","pid":42,"status":"paused","bundle":"/b","rootfs":"/r","created":"2026-01-01T00:00:00Z","owner":""}"#,
        )
        .unwrap();
        assert_eq!((s.pid, s.status), (42, OciStatus::Paused));
        let l: Option<Vec<OciState>> = serde_json::from_str("null").unwrap();
        assert!(l.is_none());
        let err = RuntimeError::Backend {
            program: "runc".into(),
            operation: "state",
            status: "exit status: 1".into(),
            stderr: "container does not exist".into(),
        };
        assert!(is_not_found(&err));
    }
}
