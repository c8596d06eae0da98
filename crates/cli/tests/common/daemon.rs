//! A real daemon (`berth up`) on a temporary data dir, stopped with its boxes when dropped.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{
    berth, closed_port, e2e_skip_reason, health_ok, link_test_image_cache, stderr, stdout,
};

/// The daemon as a child process; SIGTERM (then SIGKILL) on drop, so no box outlives us.
pub struct Daemon {
    pub child: Child,
    pub data_dir: tempfile::TempDir,
    pub log: PathBuf,
    pub out: PathBuf,
    /// `berth up`'s flags after `--listen` and `--data-dir`, given again at a restart.
    pub args: Vec<OsString>,
}

impl Daemon {
    pub fn start() -> Daemon {
        Daemon::start_in(tempfile::tempdir().unwrap(), None, &[])
    }

    /// A daemon whose `<data dir>/berth.toml` is `config`.
    pub fn start_with_config(config: &str) -> Daemon {
        Daemon::start_in(tempfile::tempdir().unwrap(), Some(config), &[])
    }

    /// A daemon on `data_dir` (whose `berth.toml` becomes `config` when given), started
    /// with `args` after `berth up --listen … --data-dir …` (`--tls-cert …`,
    /// `--public-url …`); ready once it answers, over TLS or not.
    pub fn start_in(data_dir: tempfile::TempDir, config: Option<&str>, args: &[&OsStr]) -> Daemon {
        if let Some(config) = config {
            fs::write(data_dir.path().join("berth.toml"), config).unwrap();
        }
        let log = data_dir.path().join("daemon.stderr");
        let out = data_dir.path().join("daemon.stdout");
        let args: Vec<OsString> = args.iter().map(|a| a.to_os_string()).collect();
        let listen = format!("127.0.0.1:{}", closed_port());
        let child = Daemon::spawn(data_dir.path(), &listen, &args, &out, &log);
        let mut daemon = Daemon {
            child,
            data_dir,
            log,
            out,
            args,
        };
        daemon.wait_healthy(&listen);
        daemon
    }

    fn spawn(dir: &Path, listen: &str, args: &[OsString], out: &Path, log: &Path) -> Child {
        let append = |path: &Path| {
            fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap()
        };
        berth()
            .args(["up", "--listen", listen, "--data-dir"])
            .arg(dir)
            .args(args)
            .stdout(append(out))
            .stderr(append(log))
            .spawn()
            .unwrap()
    }

    /// SIGKILLs the daemon, as a crash would (its boxes keep running), and starts it again
    /// on the same data dir.
    pub fn crash_and_restart(&mut self) {
        self.kill();
        self.restart();
    }

    /// SIGKILLs the daemon, as a crash would (its boxes keep running).
    pub fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Stops the daemon and starts it again on the same data dir with `args` (e.g.
    /// `--runtime qemu` once its images are built).
    pub fn restart_with(&mut self, args: &[&str]) {
        self.terminate();
        self.args = args.iter().map(OsString::from).collect();
        self.restart();
    }

    /// Starts the daemon again on the same data dir, after [`Daemon::kill`].
    pub fn restart(&mut self) {
        let listen = format!("127.0.0.1:{}", closed_port());
        self.child = Daemon::spawn(
            self.data_dir.path(),
            &listen,
            &self.args,
            &self.out,
            &self.log,
        );
        self.wait_healthy(&listen);
    }

    /// Waits until the daemon on `listen` answers `/v1/health` (over TLS: until it listens
    /// and has written `berth.url`, which it does once its certificate is loaded).
    pub fn wait_healthy(&mut self, listen: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let tls = self.args.iter().any(|a| a == "--tls-cert");
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "berth up exited ({status}) before answering:\n{}",
                    self.logs()
                );
            }
            let ready = if tls {
                self.dir().join("berth.url").is_file() && TcpStream::connect(listen).is_ok()
            } else {
                health_ok(listen)
            };
            if ready {
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

    pub fn logs(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            fs::read_to_string(&self.out).unwrap_or_default(),
            fs::read_to_string(&self.log).unwrap_or_default()
        )
    }

    pub fn dir(&self) -> &Path {
        self.data_dir.path()
    }

    /// Runs `berth --data-dir <ours> <args>`, so the client finds the daemon by its files.
    pub fn berth(&self, args: &[&str]) -> Output {
        self.berth_with(args, None, &[])
    }

    /// Like [`Daemon::berth`], with bytes on stdin (else /dev/null) and extra env vars.
    pub fn berth_with(&self, args: &[&str], stdin: Option<&[u8]>, env: &[(&str, &str)]) -> Output {
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

    /// Polls `berth box show NAME` (a read: it wakes nothing) until `done` holds for it;
    /// returns the box as shown then. Fails after `within`, with the daemon's log.
    pub fn wait_for_box(
        &self,
        name: &str,
        within: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + within;
        loop {
            let shown: serde_json::Value =
                serde_json::from_str(&self.berth_ok(&["box", "show", name])).unwrap();
            if done(&shown) {
                return shown;
            }
            assert!(
                Instant::now() < deadline,
                "{name} is still {} ({}) after {within:?}:\n{}",
                shown["state"],
                shown["state_reason"],
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A daemon that offers qemu ([`Daemon::offer_qemu`]); `None` (a skip, said and
    /// recorded) where the host cannot run boxes or VMs.
    pub fn start_offering_qemu() -> Option<Daemon> {
        if let Some(reason) = e2e_skip_reason() {
            berth_testkit::skip("sandbox", &reason);
            return None;
        }
        let daemon = Daemon::start();
        daemon.offer_qemu()?;
        Some(daemon)
    }

    /// A daemon with a stopped qemu box `name` of the `minimal` template; `None` (a skip,
    /// said and recorded) where the host cannot run boxes or VMs.
    pub fn start_with_qemu_box(name: &str) -> Option<Daemon> {
        let daemon = Daemon::start_offering_qemu()?;
        daemon.berth_ok(&[
            "box",
            "create",
            name,
            "--runtime",
            "qemu",
            "--template",
            "minimal",
        ]);
        Some(daemon)
    }

    /// Makes the daemon's VM images (from the shared test image cache, through `berth image
    /// build`), after which the running daemon offers qemu at once; `None` (a `qemu` skip, said
    /// and recorded: `berth_testkit::skip`) without QEMU or the Debian mirror.
    pub fn offer_qemu(&self) -> Option<()> {
        let (env, name) = ("BERTH_QEMU", berth_runtime::qemu::DEFAULT_QEMU);
        if berth_runtime::qemu::find_program(env, name).is_none() {
            berth_testkit::skip(
                "qemu",
                format!("{name} is not installed (scripts/install-deps.sh --tests)"),
            );
            return None;
        }
        link_test_image_cache(self.dir());
        let built = self.berth(&["image", "build"]);
        if !built.status.success() {
            let err = stderr(&built);
            if err.contains("no network to the Debian mirror") {
                berth_testkit::skip("qemu", err.trim());
                return None;
            }
            panic!("berth image build failed: {err}");
        }
        // `image build` returns once the running daemon has checked the new images.
        let listed = self.berth_ok(&["runtime", "ls"]);
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with("qemu") && l.contains("yes")),
            "qemu unavailable right after the image build:\n{listed}\n{}",
            self.logs()
        );
        Some(())
    }

    /// The daemon's `host:port` and admin key, for tests that speak HTTP to it directly.
    pub fn api_endpoint(&self) -> (String, String) {
        let url = fs::read_to_string(self.dir().join("berth.url")).unwrap();
        let addr = url
            .trim()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let key = fs::read_to_string(self.dir().join("admin.key"))
            .unwrap()
            .trim()
            .to_owned();
        (addr, key)
    }

    pub fn berth_ok(&self, args: &[&str]) -> String {
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
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
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
    pub fn running_containers(&self) -> Vec<String> {
        live_containers(self.dir())
            .into_iter()
            .map(|(id, status)| format!("\"{id}\" ({status})"))
            .collect()
    }
}

/// (id, status) of each container under `<data_dir>/oci` that is not stopped; none when
/// runc cannot list them (this also runs from `drop`, where nothing may panic).
fn live_containers(data_dir: &Path) -> Vec<(String, String)> {
    let root = data_dir.join("oci");
    if !root.is_dir() {
        return Vec::new();
    }
    let Ok(out) = Command::new("runc")
        .arg("--root")
        .arg(&root)
        .args(["list", "--format", "json"])
        .output()
    else {
        return Vec::new();
    };
    let list: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    list.as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] != "stopped")
        .filter_map(|c| Some((c["id"].as_str()?.to_owned(), c["status"].to_string())))
        .collect()
}

/// Ends every box a stopped daemon (or node) of `data_dir` left behind, saying so, and
/// releases their volume mounts: a test's box must not outlive it, even when its daemon
/// was killed (a crash, a node lost for good) or its shutdown missed the box.
pub fn end_leftover_boxes(data_dir: &Path) {
    let root = data_dir.join("oci");
    for (id, status) in live_containers(data_dir) {
        eprintln!("warning: box container {id} ({status}) outlived its daemon; killing it");
        for args in [&["kill", &id, "KILL"][..], &["delete", "-f", &id]] {
            let _ = Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(args)
                .output();
        }
    }
    berth_runtime::sandbox::release_all_mounts_blocking(data_dir);
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.terminate();
        end_leftover_boxes(self.dir());
    }
}
