//! The fixtures of the harness tests: a box's directories, a real `berth-init` on them,
//! and helpers to read its events.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use berth_protocol::guest::BOX_USER_UID;
use berth_protocol::harness::{DeliverRequest, GuestEvent, HarnessStatus};
use berth_protocol::ErrorCode;
use berth_runtime::{BootToken, GuestAddr, GuestClient, GuestError};
use serde_json::{json, Value};

pub fn echo_harness() -> String {
    let bin = env!("ECHO_HARNESS_BIN");
    assert!(
        Path::new(bin).exists(),
        "{bin} is missing: build it with `make init`"
    );
    bin.to_owned()
}

/// The directories of one box; every process still working in them is killed on drop.
pub struct BoxDirs {
    pub dir: tempfile::TempDir,
}

impl BoxDirs {
    pub fn new() -> BoxDirs {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["run", "home", "state"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let home = dir.path().join("home");
        std::os::unix::fs::chown(&home, Some(BOX_USER_UID), Some(BOX_USER_UID)).unwrap();
        BoxDirs { dir }
    }

    pub fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// Writes `harness.json`: the echo harness with `env` and `extra` config keys.
    pub fn harness(&self, env: Value, extra: Value) {
        let mut env = env;
        env["ECHO_HARNESS_MEMORY"] = json!(self.path("memory"));
        // The box user runs it: a copy inside these (world-traversable) dirs, since the
        // build tree may sit under a directory only root can enter (e.g. /root).
        let bin = self.path("bin/echo-harness");
        if !bin.exists() {
            std::fs::create_dir_all(self.path("bin")).unwrap();
            std::fs::copy(echo_harness(), &bin).unwrap();
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut config = json!({
            "command": [bin],
            "resume_args": ["--resume", "{session}"],
            "env": env,
        });
        for (k, v) in extra.as_object().unwrap() {
            config[k] = v.clone();
        }
        std::fs::write(self.path("run/harness.json"), config.to_string()).unwrap();
    }

    /// Writes `services.json` (a JSON array of service configs).
    pub fn services(&self, services: Value) {
        std::fs::write(self.path("run/services.json"), services.to_string()).unwrap();
    }

    /// Kills every process whose working directory is inside these dirs (a harness left
    /// behind by a SIGKILLed berth-init).
    pub fn kill_strays(&self) {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if std::fs::read_link(entry.path().join("cwd"))
                .is_ok_and(|cwd| cwd.starts_with(self.dir.path()))
            {
                // SAFETY: plain kill(2) on a pid we found working in our temp dir.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }

    pub fn transcript_user_lines(&self) -> Vec<String> {
        let dir = self.path("home/.echo-harness");
        let mut lines = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                if v["role"] == "user" {
                    lines.push(v["text"].as_str().unwrap().to_owned());
                }
            }
        }
        lines
    }
}

impl Drop for BoxDirs {
    fn drop(&mut self) {
        self.kill_strays();
    }
}

/// One running berth-init; stopped (SIGTERM, then SIGKILL) on drop.
pub struct Agent {
    pub child: Child,
    pub client: GuestClient,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return; // already reaped: its pid may belong to someone else now
        }
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    pub fn start(dirs: &BoxDirs, extra_args: &[&str]) -> Agent {
        let mut random = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut random)
            .unwrap();
        let token = BootToken::from_random(random);
        let run = dirs.path("run");
        std::fs::write(run.join("token"), token.as_str()).unwrap();
        let socket = run.join("agent.sock");
        let _ = std::fs::remove_file(&socket);
        let child = Command::new(env!("CARGO_BIN_EXE_berth-init"))
            .arg("--run-dir")
            .arg(&run)
            .arg("--home")
            .arg(dirs.path("home"))
            .arg("--memory")
            .arg(dirs.path("memory"))
            .arg("--state-dir")
            .arg(dirs.path("state"))
            // Not the box's ports: tests run side by side on the host's loopback.
            .args([
                "--egress-tls",
                "127.0.0.1:0",
                "--egress-proxy",
                "127.0.0.1:0",
            ])
            .args(extra_args)
            .spawn()
            .unwrap();
        let mut agent = Agent {
            child,
            client: GuestClient::new(GuestAddr::Unix(socket.clone()), token),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(
                agent.child.try_wait().unwrap().is_none(),
                "berth-init exited"
            );
            assert!(
                Instant::now() < deadline,
                "berth-init did not listen in time"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        agent
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub async fn wait_status(
        &self,
        what: &str,
        ok: impl Fn(&HarnessStatus) -> bool,
    ) -> HarnessStatus {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let status = self.client.harness_status().await.unwrap();
            if ok(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "waiting for {what}: {status:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn deliver(&self, id: &str, content: &str) -> Result<bool, GuestError> {
        let req = DeliverRequest {
            id: id.into(),
            content: content.into(),
        };
        self.client.deliver(&req).await.map(|r| {
            assert_eq!(r.id, id);
            r.duplicate
        })
    }

    /// Events with `seq > after` until `done` holds for the events read so far.
    pub async fn events_until(
        &self,
        after: u64,
        done: impl Fn(&[GuestEvent]) -> bool,
    ) -> Vec<GuestEvent> {
        let mut stream = self.client.events(after).await.unwrap();
        let mut events = Vec::new();
        let read = async {
            while !done(&events) {
                let event = stream.next_frame().await.unwrap().expect("stream ended");
                events.push(event);
            }
        };
        if tokio::time::timeout(Duration::from_secs(15), read)
            .await
            .is_err()
        {
            panic!("timed out; events so far: {events:#?}");
        }
        events
    }
}

pub fn results(events: &[GuestEvent]) -> usize {
    events.iter().filter(|e| e.kind == "result").count()
}

pub fn kinds(events: &[GuestEvent]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

pub fn remote(err: GuestError) -> (u16, ErrorCode) {
    match err {
        GuestError::Remote { status, body } => (status, body.error.code),
        other => panic!("expected an error answer, got {other:?}"),
    }
}

pub fn assert_contiguous(events: &[GuestEvent]) {
    for pair in events.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1, "a gap: {pair:#?}");
    }
}
