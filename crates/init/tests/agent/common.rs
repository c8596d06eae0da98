//! The fixture every agent test uses: a real `berth-init` on a temp run dir, and helpers
//! to run commands and read answers.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use berth_protocol::guest::{BoxUser, ExecFrame, ExecRequest, FileQuery, BOX_USER_UID};
use berth_protocol::ErrorCode;
use berth_runtime::{BootToken, GuestAddr, GuestClient, GuestError};

/// One running agent; killed and cleaned up on drop.
pub struct Agent {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub token: BootToken,
    pub client: GuestClient,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    pub fn start() -> Agent {
        // Not the box's ports: tests run side by side on the host's loopback.
        Agent::start_with(|_| {}, ["127.0.0.1:0", "127.0.0.1:0"])
    }

    /// Starts an agent after `prepare` ran on its run dir, with the egress listeners at
    /// `egress` (TLS, proxy).
    pub fn start_with(prepare: impl FnOnce(&Path), egress: [&str; 2]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        // The box user must be able to reach its home inside the temp dir.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let run = dir.path().join("run");
        let home = dir.path().join("home");
        std::fs::create_dir(&run).unwrap();
        std::fs::create_dir(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(BOX_USER_UID), Some(BOX_USER_UID)).unwrap();
        let mut random = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut random)
            .unwrap();
        let token = BootToken::from_random(random);
        std::fs::write(run.join("token"), token.as_str()).unwrap();
        prepare(&run);
        let child = Command::new(env!("CARGO_BIN_EXE_berth-init"))
            .arg("--run-dir")
            .arg(&run)
            .arg("--home")
            .arg(&home)
            .arg("--memory")
            .arg(dir.path().join("memory"))
            // Not the host's /var/lib/berth: the agent journals its events there.
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["--egress-tls", egress[0], "--egress-proxy", egress[1]])
            .spawn()
            .unwrap();
        let socket = run.join("agent.sock");
        let client = GuestClient::new(GuestAddr::Unix(socket.clone()), token.clone());
        let mut agent = Agent {
            child,
            dir,
            token,
            client,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(
                agent.child.try_wait().unwrap().is_none(),
                "berth-init exited during boot"
            );
            assert!(
                Instant::now() < deadline,
                "berth-init did not listen in time"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        agent
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("run/agent.sock")
    }

    pub fn query(&self, rel: &str, user: BoxUser) -> FileQuery {
        FileQuery {
            path: self.home().join(rel).to_string_lossy().into_owned(),
            user,
            ..Default::default()
        }
    }

    /// Sends one raw HTTP request and returns the whole answer.
    pub fn raw(&self, head: &str) -> String {
        let mut stream = std::os::unix::net::UnixStream::connect(self.socket()).unwrap();
        stream.write_all(head.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub pid: Option<u32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub exit: Option<(Option<i32>, Option<i32>, bool)>,
    pub error: Option<ErrorCode>,
}

pub async fn run(client: &GuestClient, req: ExecRequest) -> Outcome {
    let mut stream = client.exec(&req).await.unwrap();
    let mut out = Outcome::default();
    while let Some(frame) = stream.next_frame().await.unwrap() {
        assert!(
            out.exit.is_none() && out.error.is_none(),
            "a frame after the last one: {frame:?}"
        );
        match frame {
            ExecFrame::Started { pid } => out.pid = Some(pid),
            ExecFrame::Stdout { data } => out.stdout.extend(data),
            ExecFrame::Stderr { data } => out.stderr.extend(data),
            ExecFrame::Exit {
                code,
                signal,
                timed_out,
            } => out.exit = Some((code, signal, timed_out)),
            ExecFrame::Error { code, .. } => out.error = Some(code),
            ExecFrame::Unknown => panic!("unknown frame"),
        }
    }
    out
}

pub fn sh(script: &str) -> ExecRequest {
    ExecRequest {
        argv: vec!["sh".into(), "-c".into(), script.into()],
        ..Default::default()
    }
}

pub fn remote_code(err: GuestError) -> (u16, ErrorCode) {
    match err {
        GuestError::Remote { status, body } => (status, body.error.code),
        other => panic!("expected an error answer, got {other:?}"),
    }
}

pub fn gone(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as i32, 0) != 0 }
}

pub async fn wait_gone(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone(pid) {
        assert!(Instant::now() < deadline, "process {pid} still exists");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
