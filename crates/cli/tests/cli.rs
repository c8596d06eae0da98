//! Runs the built `berth` binary: first what needs no daemon, then (as root, with runc and
//! berth-init) an end-to-end run against a real `berth up`.

use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BERTH: &str = env!("CARGO_BIN_EXE_berth");

/// A `berth` command with a clean environment: no daemon settings leak in from the host.
fn berth() -> Command {
    let mut cmd = Command::new(BERTH);
    cmd.env_remove("BERTH_URL")
        .env_remove("BERTH_API_KEY")
        .env_remove("BERTH_DATA_DIR")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    cmd
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A failure is exactly one `berth: …` line on stderr.
fn assert_one_line_error(out: &Output, expected_status: i32, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(expected_status), "stderr: {err}");
    assert!(err.starts_with("berth: "), "stderr: {err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "stderr: {err:?}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "stderr: {err:?}"
    );
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} not in {err:?}");
    }
}

#[test]
fn help_lists_the_commands() {
    let out = berth().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = stdout(&out);
    for command in ["up", "box", "exec", "cp"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing:\n{text}"
        );
    }
    for var in ["BERTH_URL", "BERTH_API_KEY", "BERTH_DATA_DIR"] {
        assert!(text.contains(var), "{var} missing:\n{text}");
    }
    let out = berth().args(["box", "--help"]).output().unwrap();
    let text = stdout(&out);
    for command in ["create", "ls", "rm", "start", "stop", "show"] {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(command)),
            "{command} missing:\n{text}"
        );
    }
}

#[test]
fn version_prints_the_crate_version() {
    let out = berth().arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(
        stdout(&out).trim(),
        format!("berth {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn unreachable_daemon_is_one_line_with_a_hint() {
    let url = format!("http://127.0.0.1:{}", closed_port());
    for args in [
        &["box", "ls"][..],
        &["exec", "alice", "--", "true"],
        &["box", "create", "alice"],
    ] {
        let out = berth()
            .args(args)
            .env("BERTH_URL", &url)
            .env("BERTH_API_KEY", "berth_x")
            .output()
            .unwrap();
        assert_one_line_error(&out, 1, &["berth up", &url]);
    }
}

#[test]
fn missing_daemon_files_say_to_run_berth_up() {
    let dir = tempfile::tempdir().unwrap();
    let out = berth()
        .args(["box", "ls", "--data-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_one_line_error(&out, 1, &["berth up", "BERTH_URL", "berth.url"]);
    // BERTH_DATA_DIR works like --data-dir.
    let out = berth()
        .args(["box", "ls"])
        .env("BERTH_DATA_DIR", dir.path())
        .output()
        .unwrap();
    assert_one_line_error(
        &out,
        1,
        &[&dir.path().join("berth.url").display().to_string()],
    );
}

#[test]
fn bad_cp_specs_are_clear_errors() {
    // Checked before the daemon is looked for: no BERTH_URL needed.
    let out = berth().args(["cp", "a.txt", "b.txt"]).output().unwrap();
    assert_one_line_error(&out, 1, &["NAME:PATH"]);
    let out = berth().args(["cp", "alice:a", "bob:b"]).output().unwrap();
    assert_one_line_error(&out, 1, &["between boxes"]);
    let out = berth()
        .args(["cp", "alice:/home/user/", "out"])
        .output()
        .unwrap();
    assert_one_line_error(&out, 1, &["directory"]);

    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{}", closed_port());
    let out = berth()
        .arg("cp")
        .arg(dir.path())
        .arg("alice:x")
        .env("BERTH_URL", &url)
        .env("BERTH_API_KEY", "berth_x")
        .output()
        .unwrap();
    assert_one_line_error(&out, 1, &["directories are not supported yet"]);
}

#[test]
fn usage_errors_exit_2() {
    let out = berth().args(["exec", "alice"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = berth()
        .args(["box", "create", "a", "--pids", "lots"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

// ---------------------------------------------------------------------------------------
// End to end: a real daemon and a real box.

/// The daemon as a child process; SIGTERM (then SIGKILL) on drop, so no box outlives us.
struct Daemon {
    child: Child,
    data_dir: tempfile::TempDir,
    log: PathBuf,
    out: PathBuf,
}

impl Daemon {
    fn start() -> Daemon {
        let data_dir = tempfile::tempdir().unwrap();
        let log = data_dir.path().join("daemon.stderr");
        let out = data_dir.path().join("daemon.stdout");
        let listen = format!("127.0.0.1:{}", closed_port());
        let child = berth()
            .args(["up", "--listen", &listen, "--data-dir"])
            .arg(data_dir.path())
            .stdout(fs::File::create(&out).unwrap())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut daemon = Daemon {
            child,
            data_dir,
            log,
            out,
        };
        daemon.wait_healthy(&listen);
        daemon
    }

    fn wait_healthy(&mut self, listen: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "berth up exited ({status}) before answering:\n{}",
                    self.logs()
                );
            }
            if health_ok(listen) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "berth up did not answer /v1/health in 60s:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn logs(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            fs::read_to_string(&self.out).unwrap_or_default(),
            fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    fn dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// Runs `berth --data-dir <ours> <args>`, so the client finds the daemon by its files.
    fn berth(&self, args: &[&str]) -> Output {
        self.berth_with(args, None, &[])
    }

    /// Like [`Daemon::berth`], with bytes on stdin (else /dev/null) and extra env vars.
    fn berth_with(&self, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
        let mut cmd = berth();
        cmd.arg("--data-dir")
            .arg(self.dir())
            .args(args)
            .envs(env.iter().copied());
        let out = match stdin {
            None => cmd.output().unwrap(),
            Some(bytes) => {
                let mut child = cmd
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                child.stdin.take().unwrap().write_all(bytes).unwrap();
                child.wait_with_output().unwrap()
            }
        };
        let shown = match std::str::from_utf8(&out.stdout) {
            Ok(text) if text.len() <= 4096 => text.to_string(),
            _ => format!("({} bytes)\n", out.stdout.len()),
        };
        eprintln!(
            "$ berth {} -> {:?}\n{shown}{}",
            args.join(" "),
            out.status.code(),
            stderr(&out)
        );
        out
    }

    fn berth_ok(&self, args: &[&str]) -> String {
        let out = self.berth(args);
        assert!(
            out.status.success(),
            "berth {args:?} failed: {}\n{}",
            stderr(&out),
            self.logs()
        );
        stdout(&out)
    }
}

impl Daemon {
    /// SIGTERM, then up to 30 s for a graceful exit; `None` if it had to be SIGKILLed.
    fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on our own child's pid (not yet reaped); it touches no memory.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("berth up ignored SIGTERM for 30s; killing it");
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// OCI containers still running under the daemon's runtime state (`<data>/oci`).
    fn running_containers(&self) -> Vec<String> {
        let root = self.dir().join("oci");
        if !root.is_dir() {
            return Vec::new();
        }
        let out = Command::new("runc")
            .arg("--root")
            .arg(&root)
            .args(["list", "--format", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "runc list: {}", stderr(&out));
        let list: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        list.as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["status"] != "stopped")
            .map(|c| format!("{} ({})", c["id"], c["status"]))
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.terminate();
    }
}

fn health_ok(listen: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(listen) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /v1/health HTTP/1.1\r\nHost: {listen}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Why the end-to-end test cannot run here, if it cannot.
fn e2e_skip_reason() -> Option<String> {
    if let Err(e) = berth_runtime::sandbox::SandboxRuntime::check_host("runc") {
        return Some(e.to_string());
    }
    if let Err(e) = berth_runtime::init_binary() {
        return Some(format!("no berth-init: {e}"));
    }
    None
}

#[test]
fn end_to_end_box_lifecycle_exec_and_cp() {
    if let Some(reason) = e2e_skip_reason() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let daemon = Daemon::start();
    let printed = fs::read_to_string(&daemon.out).unwrap_or_default();
    assert!(
        printed.contains("admin API key"),
        "the admin key was not printed:\n{}",
        daemon.logs()
    );
    assert!(daemon.dir().join("admin.key").is_file());
    assert!(daemon.dir().join("berth.url").is_file());

    let id = daemon.berth_ok(&["box", "create", "alice"]);
    assert!(id.trim().starts_with("bx_"), "{id}");
    let table = daemon.berth_ok(&["box", "ls"]);
    assert!(
        table.starts_with("NAME") && table.contains("alice"),
        "{table}"
    );

    let out = daemon.berth_ok(&[
        "exec",
        "alice",
        "--",
        "sh",
        "-c",
        "echo hi > ~/a.txt; id -u",
    ]);
    assert_eq!(out.trim(), "1001");

    daemon.berth_ok(&["box", "stop", "alice"]);
    daemon.berth_ok(&["box", "start", "alice"]);
    assert_eq!(
        daemon.berth_ok(&["exec", "alice", "--", "cat", "a.txt"]),
        "hi\n"
    );

    // cp round trip, bytes that are not UTF-8 included.
    let local = tempfile::tempdir().unwrap();
    let src = local.path().join("blob.bin");
    let bytes: Vec<u8> = (0..300_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(&src, &bytes).unwrap();
    let src_arg = src.to_str().unwrap();
    daemon.berth_ok(&["cp", src_arg, "alice:blob.bin"]);
    let back = local.path().join("back.bin");
    daemon.berth_ok(&["cp", "alice:/home/user/blob.bin", back.to_str().unwrap()]);
    assert!(fs::read(&back).unwrap() == bytes, "downloaded bytes differ");
    let out = daemon.berth(&["cp", "alice:blob.bin", "-"]);
    assert!(
        out.status.success() && out.stdout == bytes,
        "cp to stdout differs"
    );

    let out = daemon.berth(&["exec", "alice", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let out = daemon.berth(&["exec", "alice", "--", "sh", "-c", "echo out; echo err >&2"]);
    assert_eq!(
        (stdout(&out).as_str(), stderr(&out).as_str()),
        ("out\n", "err\n")
    );

    // Exit statuses: signals, timeouts, missing programs.
    let out = daemon.berth(&["exec", "alice", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(137));
    let out = daemon.berth(&["exec", "alice", "--timeout", "1", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(stderr(&out).contains("timed out"), "{}", stderr(&out));
    let out = daemon.berth(&["exec", "alice", "--", "no-such-program-here"]);
    assert_one_line_error(&out, 127, &[]);

    // Options reach the box; stdin is passed when it is not a terminal.
    let out = daemon.berth_ok(&[
        "exec",
        "alice",
        "--user",
        "root",
        "--cwd",
        "/tmp",
        "-e",
        "GREETING=hej",
        "--",
        "sh",
        "-c",
        "echo $(id -u) $PWD $GREETING",
    ]);
    assert_eq!(out, "0 /tmp hej\n");
    let out = daemon.berth_with(
        &["exec", "alice", "--", "tr", "a-z", "A-Z"],
        Some(b"hello\n"),
        &[],
    );
    assert_eq!(stdout(&out), "HELLO\n", "{}", stderr(&out));

    let json = daemon.berth_ok(&["box", "show", "alice"]);
    let shown: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(shown["name"], "alice");
    let json = daemon.berth_ok(&["box", "ls", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(listed["boxes"][0]["name"], "alice");

    // Errors from the daemon are one line.
    let out = daemon.berth(&["box", "show", "nobody"]);
    assert_one_line_error(&out, 1, &["nobody"]);
    let out = daemon.berth(&["box", "create", "alice"]);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth(&["box", "create", "Not_A-Name"]);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth_with(&["box", "ls"], None, &[("BERTH_API_KEY", "berth_wrong")]);
    assert_one_line_error(&out, 1, &["BERTH_API_KEY"]);
    let out = daemon.berth(&["cp", "alice:/home/user/nothing-here", "-"]);
    assert_one_line_error(&out, 1, &[]);

    daemon.berth_ok(&["box", "rm", "alice"]);

    // A box left running is stopped by a graceful shutdown.
    daemon.berth_ok(&["box", "create", "bob"]);
    daemon.berth_ok(&["box", "start", "bob"]);
    let mut daemon = daemon;
    let status = daemon.terminate();
    assert!(
        status.is_some_and(|s| s.success()),
        "berth up did not exit cleanly on SIGTERM ({status:?}):\n{}",
        daemon.logs()
    );
    let left = daemon.running_containers();
    assert!(left.is_empty(), "boxes outlived the daemon: {left:?}");
}
