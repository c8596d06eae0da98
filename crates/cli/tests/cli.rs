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
    for command in [
        "up", "box", "exec", "cp", "send", "logs", "template", "tenant",
    ] {
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
        &["send", "alice", "hi", "--no-wait"],
        &["send", "alice", "hi"],
        &["logs", "alice"],
        &["template", "ls"],
        &["tenant", "create", "acme"],
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
    for args in [
        &["send", "alice"][..],
        &["logs", "alice", "--after", "x"],
        &["box", "create", "a", "--idle-timeout", "-3"],
        &["template", "frob"],
        &["tenant", "create"],
    ] {
        let out = berth().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
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

/// `berth logs NAME` lines: `(seq, type, summary)`.
fn parse_log_lines(text: &str) -> Vec<(u64, String, String)> {
    text.lines()
        .map(|line| {
            let mut parts = line.split_whitespace();
            let seq = parts.next().and_then(|s| s.parse().ok());
            let seq = seq.unwrap_or_else(|| panic!("no seq in log line {line:?}"));
            let kind = parts.next().unwrap_or_default().to_string();
            (seq, kind, parts.collect::<Vec<_>>().join(" "))
        })
        .collect()
}

/// A long-running `berth` child whose stdout lines are collected; killed on drop.
struct Follower {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Follower {
    fn spawn(daemon: &Daemon, args: &[&str]) -> Follower {
        let mut child = berth()
            .arg("--data-dir")
            .arg(daemon.dir())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Follower {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn wait_for_line(&mut self, wanted: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let hit = wanted(&line);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(e) => panic!("no such line ({e}); saw:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// SIGINT, then the exit status (within 10 s).
    fn interrupt(&mut self) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid (not yet reaped); it touches no memory.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGINT);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("berth ignored SIGINT for 10 s");
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `berth box show NAME` until its state is `want`.
fn wait_for_state(daemon: &Daemon, name: &str, want: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let shown: serde_json::Value =
            serde_json::from_str(&daemon.berth_ok(&["box", "show", name])).unwrap();
        if shown["state"] == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} is still {} after {within:?}, not {want}:\n{}",
            shown["state"],
            daemon.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn end_to_end_send_resume_logs_templates_tenants() {
    if let Some(reason) = e2e_skip_reason() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let daemon = Daemon::start();

    let templates = daemon.berth_ok(&["template", "ls"]);
    assert!(templates.starts_with("NAME"), "{templates}");
    assert!(
        templates.lines().any(|l| l.starts_with("echo ")),
        "no echo template:\n{templates}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&daemon.berth_ok(&["template", "ls", "--json"])).unwrap();
    assert!(json["templates"].as_array().is_some_and(|t| !t.is_empty()));

    daemon.berth_ok(&["box", "create", "bob", "--template", "echo"]);
    let answer = daemon.berth_ok(&["send", "bob", "remember 42"]);
    assert!(answer.contains("42"), "answer: {answer:?}");

    daemon.berth_ok(&["box", "stop", "bob"]);
    wait_for_state(&daemon, "bob", "stopped", Duration::from_secs(5));
    // The next message wakes the box; the harness resumes its session from the volume.
    let answer = daemon.berth_ok(&["send", "bob", "what did I say?"]);
    assert!(answer.contains("remember 42"), "answer: {answer:?}");

    let timeline = daemon.berth_ok(&["exec", "bob", "--", "sh", "-c", "cat /memory/timeline/*"]);
    for needle in ["remember 42", "what did I say?", "You said: remember 42"] {
        assert!(timeline.contains(needle), "{needle:?} not in:\n{timeline}");
    }

    // The event log: increasing seqs from 1, both turns, their replays and results.
    let logs = parse_log_lines(&daemon.berth_ok(&["logs", "bob"]));
    let seqs: Vec<u64> = logs.iter().map(|(seq, _, _)| *seq).collect();
    assert_eq!(seqs.first(), Some(&1), "{logs:?}");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "gaps: {seqs:?}");
    let users: Vec<&str> = logs
        .iter()
        .filter(|(_, kind, _)| kind == "user")
        .map(|(_, _, text)| text.as_str())
        .collect();
    assert_eq!(users, ["remember 42", "what did I say?"], "{logs:?}");
    assert_eq!(logs.iter().filter(|(_, k, _)| k == "result").count(), 2);
    // --after and --json.
    let after = seqs[seqs.len() - 2];
    let tail = daemon.berth_ok(&["logs", "bob", "--after", &after.to_string(), "--json"]);
    let tail: Vec<serde_json::Value> = tail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(tail.len(), 1, "{tail:?}");
    assert_eq!(tail[0]["seq"], after + 1);

    // --no-wait returns once the message is stored; the same --id is the same message.
    let posted = daemon.berth_ok(&["send", "bob", "hi again", "--id", "k-1", "--no-wait"]);
    assert!(posted.contains("(seq "), "{posted}");
    let again = daemon.berth_ok(&["send", "bob", "hi again", "--id", "k-1", "--no-wait"]);
    assert_eq!(posted, again);
    let out = daemon.berth(&["send", "bob", "something else", "--id", "k-1", "--no-wait"]);
    assert_one_line_error(&out, 1, &[]);

    // `logs -f` prints stored events, then follows new ones live; SIGINT ends it with 0.
    let mut follow = Follower::spawn(&daemon, &["logs", "bob", "-f"]);
    follow.wait_for_line(|l| l.contains("hi again"));
    daemon.berth_ok(&["send", "bob", "follow me", "--no-wait"]);
    follow.wait_for_line(|l| l.contains("result") && l.contains("echo: follow me"));
    assert_eq!(follow.interrupt(), Some(0));
    drop(follow);

    // A harness that dies mid-turn fails the send (exit 1); it is restarted for the next.
    let out = daemon.berth(&["send", "bob", "crash"]);
    assert_one_line_error(&out, 1, &["exited with status 3"]);
    let answer = daemon.berth_ok(&["send", "bob", "still there?"]);
    assert_eq!(answer, "echo: still there?\n");
    // Sent while an earlier turn is still being answered: only our own answer is printed.
    daemon.berth_ok(&["send", "bob", "sleep 1500", "--no-wait"]);
    let answer = daemon.berth_ok(&["send", "bob", "after the nap"]);
    assert_eq!(answer, "echo: after the nap\n");

    // An idle box is reclaimed (stopped, volume kept) after its idle timeout.
    daemon.berth_ok(&[
        "box",
        "create",
        "sleepy",
        "--template",
        "echo",
        "--idle-timeout",
        "2",
    ]);
    let answer = daemon.berth_ok(&["send", "sleepy", "remember 7"]);
    assert!(answer.contains('7'), "{answer:?}");
    wait_for_state(&daemon, "sleepy", "stopped", Duration::from_secs(30));
    let answer = daemon.berth_ok(&["send", "sleepy", "what did I say?"]);
    assert!(answer.contains("remember 7"), "{answer:?}");

    // Errors are one line: a box without a harness, an unknown box.
    daemon.berth_ok(&["box", "create", "plain"]);
    let out = daemon.berth(&["send", "plain", "hi"]);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth(&["send", "nobody", "hi"]);
    assert_one_line_error(&out, 1, &["nobody"]);
    let out = daemon.berth(&["logs", "nobody"]);
    assert_one_line_error(&out, 1, &["nobody"]);

    // Templates: a bad user file is reported with its line, the good one loads.
    let dir = daemon.dir().join("templates");
    fs::create_dir_all(&dir).unwrap();
    fs::write(
        dir.join("mine.toml"),
        "name = \"mine\"\nbase = \"host\"\nidle_timeout_s = 60\n",
    )
    .unwrap();
    fs::write(dir.join("broken.toml"), "name = \"broken\"\nbase = = 1\n").unwrap();
    let out = daemon.berth(&["template", "reload"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stderr(&out).contains("broken.toml:2"), "{}", stderr(&out));
    let templates = daemon.berth_ok(&["template", "ls"]);
    assert!(
        templates.lines().any(|l| l.starts_with("mine ")),
        "{templates}"
    );
    assert!(!templates.contains("broken"), "{templates}");

    // Tenants: the key is printed once and sees only the tenant's own boxes.
    let created = daemon.berth_ok(&["tenant", "create", "acme"]);
    let key = created
        .split_whitespace()
        .find(|w| w.starts_with("berth_"))
        .unwrap_or_else(|| panic!("no key in {created:?}"));
    assert!(created.contains("tn_"), "{created}");
    let theirs = daemon.berth_with(&["box", "ls"], None, &[("BERTH_API_KEY", key)]);
    assert!(theirs.status.success(), "{}", stderr(&theirs));
    assert!(!stdout(&theirs).contains("bob"), "{}", stdout(&theirs));
    let out = daemon.berth_with(&["logs", "bob"], None, &[("BERTH_API_KEY", key)]);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth_with(&["tenant", "create", "x"], None, &[("BERTH_API_KEY", key)]);
    assert_one_line_error(&out, 1, &[]);

    let mut daemon = daemon;
    let status = daemon.terminate();
    assert!(status.is_some_and(|s| s.success()), "{}", daemon.logs());
    let left = daemon.running_containers();
    assert!(left.is_empty(), "boxes outlived the daemon: {left:?}");
}

/// Where Claude Code is installed for [`claude_code_is_a_harness`] (`.ci/run` installs it).
fn claude_code_dir() -> PathBuf {
    std::env::var_os("BERTH_CLAUDE_CODE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/srv/berth/claude-code"))
}

/// Claude Code itself, unmodified, as a box's harness: it takes messages as stream-json,
/// berth knows it received each one from its replay (`--replay-user-messages`), and after
/// the box is stopped `--continue` sends the earlier turns again. The model is a stand-in
/// inside the box (a box has no network of its own) that speaks the Messages API's SSE wire
/// format and repeats every user text it was sent.
/// Needs `npm install --prefix /srv/berth/claude-code @anthropic-ai/claude-code` (or
/// `$BERTH_CLAUDE_CODE_DIR`) and python3 on the host.
#[test]
fn claude_code_is_a_harness() {
    if let Some(reason) = e2e_skip_reason() {
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let claude_dir = claude_code_dir();
    if !claude_dir.join("node_modules/.bin/claude").exists() {
        eprintln!(
            "SKIPPED: no Claude Code in {} (npm install --prefix {} @anthropic-ai/claude-code)",
            claude_dir.display(),
            claude_dir.display()
        );
        return;
    }
    if !Path::new("/usr/bin/python3").exists() {
        eprintln!("SKIPPED: no /usr/bin/python3 for the model stand-in");
        return;
    }
    let daemon = Daemon::start();
    let stub = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/model-stub");
    fs::create_dir_all(daemon.dir().join("templates")).unwrap();
    fs::write(
        daemon.dir().join("templates/claude.toml"),
        format!(
            r#"name = "claude"
base = "host"
idle_timeout_s = 600

[[layers]]
source = "{claude}"
target = "/opt/claude-code"

[[layers]]
source = "{stub}"
target = "/opt/model-stub"

[harness]
command = ["/opt/claude-code/node_modules/.bin/claude", "-p", "--input-format", "stream-json",
           "--output-format", "stream-json", "--verbose", "--replay-user-messages"]
resume_args = ["--continue"]
ack = "replay"
env = {{ CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1", ANTHROPIC_BASE_URL = "http://127.0.0.1:18431", ANTHROPIC_API_KEY = "berth-placeholder" }}
"#,
            claude = claude_dir.display(),
            stub = stub.display()
        ),
    )
    .unwrap();
    daemon.berth_ok(&["template", "reload"]);
    daemon.berth_ok(&["box", "create", "cc", "--template", "claude"]);

    // The stand-in model runs inside the box; start it (this wakes the box) and wait for it.
    let start_model = || {
        daemon.berth_ok(&[
            "exec",
            "cc",
            "--",
            "sh",
            "-c",
            "setsid python3 /opt/model-stub/model_stub.py 18431 >/tmp/model.log 2>&1 </dev/null &",
        ]);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let probe = daemon.berth(&[
                "exec",
                "cc",
                "--",
                "python3",
                "-c",
                "import socket; socket.create_connection(('127.0.0.1', 18431), 1)",
            ]);
            if probe.status.success() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the model stand-in did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    start_model();
    let first = daemon.berth_ok(&["send", "cc", "remember 42"]);
    assert!(first.contains("stub model heard: remember 42"), "{first}");

    daemon.berth_ok(&["box", "stop", "cc"]);
    start_model();
    let second = daemon.berth_ok(&["send", "cc", "what did I say?"]);
    assert!(
        second.contains("remember 42") && second.contains("what did I say?"),
        "the resumed session must send the earlier turn: {second}"
    );
    let events = daemon.berth_ok(&["logs", "cc", "--json"]);
    let replays = events
        .lines()
        .filter(|l| l.contains("\"type\":\"user\"") && l.contains("isReplay"))
        .count();
    assert!(
        replays >= 2,
        "each message replayed by Claude Code: {events}"
    );
}
