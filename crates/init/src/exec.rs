//! `POST /v1/exec`: runs one process and streams its [`ExecFrame`]s.
//!
//! Errors, consistently: a request that is wrong in itself (bad JSON, empty `argv`, a NUL
//! byte) is an HTTP 400 before any streaming; everything that fails while starting the
//! process (no such program, a bad working directory, exec refused) is a 200 stream whose
//! only frame is `error` (no `started`). Once `started` is sent, the stream ends with
//! exactly one `exit`.
//!
//! Every process gets the same layered environment ([`Executor::env_for`]): the base
//! environment (with the egress proxy and trust bundle), then the box's own
//! ([`crate::box_env`]), then the request's (or the harness config's) `env`.
//!
//! Every process joins the box's cgroup ([`BoxCgroup`]: the box's limits, which
//! `berth-init` stays outside of) and gets `oom_score_adj` 0 (`berth-init` runs at −1000)
//! before it drops privileges.
//!
//! Each process gets its own session and process group. The timeout and a client
//! disconnect (the response body dropped) both SIGKILL the whole group; the output is
//! carried by [`pump`], the loop `/v1/processes` shares.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use berth_protocol::guest::{BoxUser, ExecFrame, ExecRequest, BOX_USER_NAME, BOX_USER_UID};
use berth_protocol::terminal::{TerminalRequest, DEFAULT_TERM};
use berth_protocol::ErrorCode;
use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot};

use crate::box_cgroup::BoxCgroup;
use crate::error::{io_code, ApiError};
use crate::reaper::{kill_group, Exit, Reaper};
use crate::seal::{seal_user_child, UserFilter};

pub mod pump;

use pump::{pump, Pipe, Sink};

/// Ends with `berth_protocol::wake::WAKE_BIN_DIR` (`berth-wake`).
const BASE_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/berth-bin";

/// Starts processes; shared by every exec call.
#[derive(Debug)]
pub struct Executor {
    pub reaper: Arc<Reaper>,
    pub filter: Arc<UserFilter>,
    /// The box user's home: default cwd and `HOME`.
    pub home: PathBuf,
    /// The box's own environment, read once at boot from `env.json`.
    pub box_env: BTreeMap<String, String>,
    /// The box's cgroup, which every process joins; `None` when there is none (a kernel
    /// without cgroups, or a host that delegated none: the box's processes then share
    /// `berth-init`'s cgroup).
    pub cgroup: Option<Arc<BoxCgroup>>,
}

/// A validated request.
#[derive(Debug)]
pub struct Prepared {
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: String,
    user: BoxUser,
    stdin: Option<String>,
    /// Keep stdin as a pipe and hand it to the caller (the harness).
    keep_stdin: bool,
    timeout: Option<Duration>,
}

impl Prepared {
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    pub fn user(&self) -> BoxUser {
        self.user
    }

    pub fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// Whether stdin text is written first (then stdin is closed).
    pub fn has_stdin_text(&self) -> bool {
        self.stdin.is_some()
    }

    /// Keeps stdin open as a pipe handed to the caller ([`Running::stdin`]).
    pub fn keep_stdin_open(mut self) -> Self {
        self.keep_stdin = true;
        self
    }
}

impl Executor {
    /// Checks a request body; errors here are HTTP errors.
    pub fn prepare(&self, body: &[u8]) -> Result<Prepared, ApiError> {
        let req: ExecRequest = serde_json::from_slice(body).map_err(ApiError::BadJson)?;
        self.prepare_request(req)
    }

    /// Checks a parsed request.
    pub fn prepare_request(&self, req: ExecRequest) -> Result<Prepared, ApiError> {
        check_command(&req.argv, &req.env, req.cwd.as_ref())?;
        let env = self.env_for(req.user, req.env);
        Ok(Prepared {
            argv: req.argv,
            env,
            cwd: self.cwd_or_home(req.cwd),
            user: req.user,
            stdin: req.stdin,
            keep_stdin: false,
            timeout: req.timeout_ms.map(Duration::from_millis),
        })
    }

    /// Checks a terminal's command; empty `argv` is the user's login shell. `TERM` is set
    /// under the request's own variables.
    pub fn prepare_terminal(&self, req: &TerminalRequest) -> Result<Prepared, ApiError> {
        let argv = if req.argv.is_empty() {
            login_shell()
        } else {
            req.argv.clone()
        };
        check_command(&argv, &req.env, req.cwd.as_ref())?;
        let term = req.term.as_deref().unwrap_or(DEFAULT_TERM);
        if term.is_empty() || term.contains('\0') {
            return Err(ApiError::NulInExec);
        }
        let mut own = BTreeMap::from([("TERM".to_owned(), term.to_owned())]);
        own.extend(req.env.clone());
        Ok(Prepared {
            argv,
            env: self.env_for(req.user, own),
            cwd: self.cwd_or_home(req.cwd.clone()),
            user: req.user,
            stdin: None,
            keep_stdin: false,
            timeout: None,
        })
    }

    /// The requested working directory, or the box user's home (for root too: a
    /// template's `/root` may not exist, `/home/user` always does).
    fn cwd_or_home(&self, cwd: Option<String>) -> String {
        cwd.unwrap_or_else(|| self.home.to_string_lossy().into_owned())
    }

    /// The environment of a process whose own variables are `own`: base < box < own.
    pub fn env_for(
        &self,
        user: BoxUser,
        own: BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut env = self.base_env(user);
        env.extend(self.box_env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.extend(own);
        env
    }

    /// The environment every process starts with, egress settings included.
    fn base_env(&self, user: BoxUser) -> BTreeMap<String, String> {
        let (home, user_name) = match user {
            BoxUser::User => (self.home.to_string_lossy().into_owned(), BOX_USER_NAME),
            BoxUser::Root => ("/root".to_owned(), "root"),
        };
        [
            ("PATH", BASE_PATH),
            ("HOME", home.as_str()),
            ("USER", user_name),
            ("LOGNAME", user_name),
            ("SHELL", "/bin/sh"),
            ("LANG", "C.UTF-8"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .chain(
            crate::egress::client_env()
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v)),
        )
        .collect()
    }

    /// Starts a long-lived process as the box user in its home, with stdin kept open as a
    /// pipe (the harness). The error is a readable reason.
    pub fn spawn_piped(
        &self,
        argv: Vec<String>,
        extra_env: &BTreeMap<String, String>,
    ) -> Result<Running, String> {
        check_command(&argv, extra_env, None)
            .map_err(|err| format!("the harness command: {err}"))?;
        let env = self.env_for(BoxUser::User, extra_env.clone());
        let req = Prepared {
            argv,
            env,
            cwd: self.home.to_string_lossy().into_owned(),
            user: BoxUser::User,
            stdin: None,
            keep_stdin: true,
            timeout: None,
        };
        self.spawn(&req).map_err(|(_, message)| message)
    }

    /// Starts the process and returns the stream of NDJSON frames.
    pub fn start(&self, req: Prepared) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel(8);
        match self.spawn(&req) {
            Err((code, message)) => {
                let _ = tx.try_send(frame(&ExecFrame::Error { code, message }));
            }
            Ok(running) => {
                let _ = tx.try_send(frame(&ExecFrame::Started {
                    pid: running.pid as u32,
                }));
                let reaper = self.reaper.clone();
                tokio::spawn(drive(running, tx, req.timeout, reaper));
            }
        }
        rx
    }

    /// Starts the process with pipes; the caller drives them.
    pub fn spawn(&self, req: &Prepared) -> Result<Running, (ErrorCode, String)> {
        self.spawn_with(req, ChildIo::Pipes)
    }

    /// Starts the process in a new session whose controlling terminal is `tty` (a PTY's
    /// slave side), which is also its stdin, stdout and stderr.
    pub fn spawn_on_terminal(
        &self,
        req: &Prepared,
        tty: &OwnedFd,
    ) -> Result<(i32, oneshot::Receiver<Exit>), (ErrorCode, String)> {
        let running = self.spawn_with(req, ChildIo::Terminal(tty))?;
        Ok((running.pid, running.exit))
    }

    fn spawn_with(&self, req: &Prepared, io: ChildIo<'_>) -> Result<Running, (ErrorCode, String)> {
        let argv0 = &req.argv[0];
        let path_var = req.env.get("PATH").map(String::as_str).unwrap_or(BASE_PATH);
        let program = find_program(argv0, path_var)
            .ok_or_else(|| (ErrorCode::NotFound, format!("{argv0}: command not found")))?;
        if !Path::new(&req.cwd).is_dir() {
            return Err((
                ErrorCode::NotFound,
                format!("working directory {:?} is not a directory", req.cwd),
            ));
        }
        let cwd = CString::new(req.cwd.as_bytes())
            .map_err(|_| (ErrorCode::InvalidRequest, "NUL in cwd".into()))?;
        let mut cmd = Command::new(&program);
        cmd.arg0(argv0)
            .args(&req.argv[1..])
            .env_clear()
            .envs(&req.env);
        let on_terminal = matches!(io, ChildIo::Terminal(_));
        match io {
            ChildIo::Pipes => {
                cmd.stdin(if req.stdin.is_some() || req.keep_stdin {
                    Stdio::piped()
                } else {
                    Stdio::null()
                })
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            }
            ChildIo::Terminal(tty) => {
                let dup = || {
                    tty.try_clone().map(Stdio::from).map_err(|err| {
                        (
                            io_code(&err),
                            format!("cannot hand the terminal to {argv0}: {err}"),
                        )
                    })
                };
                cmd.stdin(dup()?).stdout(dup()?).stderr(dup()?);
            }
        }
        let filter = self.filter.clone();
        let as_user = req.user == BoxUser::User;
        let cgroup = self.cgroup.clone();
        // SAFETY: the closure only makes system calls on data prepared before the fork
        // (the cgroup file, the filter programs and the cwd C string); it allocates nothing
        // and takes no lock.
        unsafe {
            cmd.pre_exec(move || {
                // First, while still root: a process outside the cgroup would escape the
                // box's process limit, so failing to join fails the start.
                if let Some(cgroup) = &cgroup {
                    cgroup.join_from_child()?;
                }
                seal_user_child(as_user, BOX_USER_UID, &filter)?;
                // The new session (seal_user_child made it) takes its stdin, the PTY, as
                // its controlling terminal: job control, ^C and SIGWINCH then work.
                if on_terminal && libc::ioctl(0, libc::TIOCSCTTY, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::chdir(cwd.as_ptr()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let spawn_err =
            |err: std::io::Error| (io_code(&err), format!("cannot start {argv0}: {err}"));
        let (mut child, exit) = self
            .reaper
            .spawn(|| {
                let child = cmd.spawn()?;
                Ok((child.id() as i32, child))
            })
            .map_err(spawn_err)?;
        let take = |fd: Option<OwnedFd>| fd.map(pipe::Receiver::from_owned_fd).transpose();
        let stdout = take(child.stdout.take().map(Into::into));
        let stderr = take(child.stderr.take().map(Into::into));
        let stdin = child
            .stdin
            .take()
            .map(|s| pipe::Sender::from_owned_fd(s.into()))
            .transpose();
        let pid = child.id() as i32;
        let (stdout, stderr, stdin) = match (stdout, stderr, stdin) {
            (Ok(o), Ok(e), Ok(i)) => (o, e, i),
            (Err(err), _, _) | (_, Err(err), _) | (_, _, Err(err)) => {
                kill_group(pid);
                return Err((
                    ErrorCode::Internal,
                    format!("cannot watch the pipes of {argv0}: {err}"),
                ));
            }
        };
        let mut kept = None;
        if let Some(mut sender) = stdin {
            if let Some(text) = req.stdin.clone() {
                tokio::spawn(async move {
                    // EPIPE when the process does not read its stdin is fine.
                    let _ = sender.write_all(text.as_bytes()).await;
                });
            } else if req.keep_stdin {
                kept = Some(sender);
            }
        }
        Ok(Running {
            pid,
            stdin: kept,
            stdout,
            stderr,
            exit,
        })
    }
}

/// How a new process's standard streams are set up.
enum ChildIo<'a> {
    /// Pipes to `berth-init` (stdin: a pipe or `/dev/null`).
    Pipes,
    /// All three on this PTY slave, which becomes the controlling terminal.
    Terminal(&'a OwnedFd),
}

/// Checks a command before anything starts: a program, and no NUL byte or bad variable
/// name anywhere.
fn check_command(
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&String>,
) -> Result<(), ApiError> {
    if argv.first().is_none_or(|p| p.is_empty()) {
        return Err(ApiError::EmptyArgv);
    }
    let has_nul = |s: &String| s.contains('\0');
    if argv.iter().any(has_nul)
        || env
            .iter()
            .any(|(k, v)| has_nul(k) || has_nul(v) || k.is_empty() || k.contains('='))
        || cwd.is_some_and(has_nul)
    {
        return Err(ApiError::NulInExec);
    }
    Ok(())
}

/// A login shell: bash when the box has it, else sh.
fn login_shell() -> Vec<String> {
    let shell = if Path::new("/bin/bash").is_file() {
        "/bin/bash"
    } else {
        "/bin/sh"
    };
    vec![shell.to_owned(), "-l".to_owned()]
}

/// A started process: its pid (also its process group), pipes and exit status.
pub struct Running {
    pub pid: i32,
    /// Only when the caller asked to keep stdin.
    pub stdin: Option<pipe::Sender>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
    pub exit: oneshot::Receiver<Exit>,
}

/// Sends the output as frames until the process is done, then `exit`. The client going
/// away (the body dropped) kills the group.
async fn drive(
    mut run: Running,
    tx: mpsc::Sender<Bytes>,
    timeout: Option<Duration>,
    reaper: Arc<Reaper>,
) {
    let Some(exit) = pump(&mut run, timeout, &mut FrameSink(tx.clone())).await else {
        return;
    };
    let _ = tx
        .send(frame(&ExecFrame::Exit {
            code: exit.code,
            signal: exit.signal,
            timed_out: exit.timed_out,
        }))
        .await;
    reaper.forget_group_if_empty(run.pid);
}

/// The exec response body: one NDJSON frame per chunk, as fast as the client reads.
struct FrameSink(mpsc::Sender<Bytes>);

impl Sink for FrameSink {
    async fn output(&mut self, pipe: Pipe, data: &[u8]) -> bool {
        let data = data.to_vec();
        let f = match pipe {
            Pipe::Stdout => ExecFrame::Stdout { data },
            Pipe::Stderr => ExecFrame::Stderr { data },
        };
        self.0.send(frame(&f)).await.is_ok()
    }

    async fn gone(&self) {
        self.0.closed().await
    }
}

fn frame(f: &ExecFrame) -> Bytes {
    let mut line = serde_json::to_vec(f).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// The program to run: `name` itself when it has a `/`, else the first executable file
/// named `name` in `path_var`.
pub fn find_program(name: &str, path_var: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    path_var
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn executor() -> Executor {
        Executor {
            reaper: Arc::default(),
            filter: Arc::new(UserFilter::build().unwrap()),
            home: "/home/user".into(),
            box_env: BTreeMap::from([
                ("ANTHROPIC_API_KEY".to_owned(), "berth-ph-1".to_owned()),
                ("LANG".to_owned(), "box".to_owned()),
                ("HTTPS_PROXY".to_owned(), "http://box".to_owned()),
            ]),
            cgroup: None,
        }
    }

    #[test]
    fn programs_are_found_in_path() {
        assert_eq!(
            find_program("sh", BASE_PATH).unwrap().file_name().unwrap(),
            "sh"
        );
        assert_eq!(find_program("./x", "").unwrap(), PathBuf::from("./x"));
        assert!(find_program("no-such-program-berth", BASE_PATH).is_none());
    }

    #[test]
    fn requests_are_validated_and_env_is_layered() {
        let ex = executor();
        assert!(matches!(
            ex.prepare(br#"{"argv":[]}"#),
            Err(ApiError::EmptyArgv)
        ));
        assert!(matches!(ex.prepare(b"{"), Err(ApiError::BadJson(_))));
        assert!(matches!(
            ex.prepare(br#"{"argv":["a\u0000"]}"#),
            Err(ApiError::NulInExec)
        ));
        let p = ex
            .prepare(br#"{"argv":["env"],"env":{"LANG":"fr","X":"1"}}"#)
            .unwrap();
        assert_eq!(p.env["LANG"], "fr");
        assert_eq!(p.env["X"], "1");
        assert_eq!(p.env["HOME"], "/home/user");
        assert_eq!(p.env["USER"], "user");
        assert_eq!(p.cwd, "/home/user");
        let root = ex.prepare(br#"{"argv":["id"],"user":"root"}"#).unwrap();
        assert_eq!(root.env["USER"], "root");
        assert_eq!(root.cwd, "/home/user");
    }

    #[test]
    fn env_is_base_then_box_then_own() {
        let ex = executor();
        let own = BTreeMap::from([("LANG".to_owned(), "own".to_owned())]);
        let env = ex.env_for(BoxUser::User, own);
        assert_eq!(env["LANG"], "own", "the request wins over the box");
        assert_eq!(
            env["HTTPS_PROXY"], "http://box",
            "the box wins over the base"
        );
        assert_eq!(env["ANTHROPIC_API_KEY"], "berth-ph-1");
        assert_eq!(env["https_proxy"], "http://127.0.0.1:3128");
        assert_eq!(env["SSL_CERT_FILE"], berth_protocol::guest::BOX_CA_BUNDLE);
        assert_eq!(env["PATH"], BASE_PATH);
        assert!(!env.contains_key("HTTP_PROXY"));
        let p = ex.prepare(br#"{"argv":["env"],"user":"root"}"#).unwrap();
        assert_eq!(p.env["ANTHROPIC_API_KEY"], "berth-ph-1");
        assert_eq!(p.env["LANG"], "box");
        assert_eq!(p.env["NO_PROXY"], "localhost,127.0.0.1");
    }
}
