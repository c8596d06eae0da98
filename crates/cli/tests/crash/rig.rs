//! The crash test's rig: the daemon as a child process restarted at will, raw HTTP to it,
//! and the guards that kill what it leaves behind.

use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BERTH: &str = env!("CARGO_BIN_EXE_berth");

pub fn skip_reason() -> Option<String> {
    if let Err(e) = berth_runtime::sandbox::SandboxRuntime::check_host("runc") {
        return Some(e.to_string());
    }
    if let Err(e) = berth_runtime::init_binary() {
        return Some(format!("no berth-init: {e}"));
    }
    match std::env::var_os("ECHO_HARNESS_BIN") {
        Some(path) if Path::new(&path).is_file() => None,
        _ => Some("no echo-harness (ECHO_HARNESS_BIN; `make init` builds it)".into()),
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

// ---------------------------------------------------------------------------------------
// The daemon and the cleanup guard.

/// The daemon child and everything it may leave behind. Drop kills the daemon (SIGKILL),
/// then kills and deletes every OCI container under `<data>/oci`, then removes the data dir.
pub struct Rig {
    pub data_dir: tempfile::TempDir,
    pub listen: String,
    pub child: Mutex<Option<Child>>,
    pub key: Mutex<String>,
    pub starts: AtomicUsize,
}

impl Rig {
    pub fn new() -> Rig {
        Rig {
            data_dir: tempfile::tempdir().unwrap(),
            listen: format!("127.0.0.1:{}", free_port()),
            child: Mutex::new(None),
            key: Mutex::new(String::new()),
            starts: AtomicUsize::new(0),
        }
    }

    pub fn dir(&self) -> &Path {
        self.data_dir.path()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir().join("daemon.log")
    }

    /// Starts `berth up` (appending to one log) and waits until it answers.
    pub fn start_daemon(&self) {
        let n = self.starts.fetch_add(1, Ordering::SeqCst);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap();
        writeln!(&log, "===== start {n} =====").unwrap();
        let child = Command::new(BERTH)
            .args(["up", "--listen", &self.listen, "--data-dir"])
            .arg(self.dir())
            .env_remove("BERTH_URL")
            .env_remove("BERTH_API_KEY")
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        *self.child.lock().unwrap() = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self
                .child
                .lock()
                .unwrap()
                .as_mut()
                .unwrap()
                .try_wait()
                .unwrap()
            {
                panic!("berth up exited ({status}):\n{}", self.log_tail());
            }
            if let Ok((200, _)) = request(&self.listen, "GET", "/v1/health", "", None) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "berth up did not answer:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let key = fs::read_to_string(self.dir().join("admin.key")).unwrap();
        *self.key.lock().unwrap() = key.trim().to_string();
    }

    /// SIGKILL, as a crash would.
    pub fn kill_daemon(&self) {
        let taken = self.child.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(mut child) = taken {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> std::io::Result<(u16, Value)> {
        let key = self.key.lock().unwrap().clone();
        request(&self.listen, method, path, &key, body)
    }

    pub fn call_ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        match self.call(method, path, body) {
            Ok((status, value)) if (200..300).contains(&status) => value,
            other => panic!("{method} {path}: {other:?}\n{}", self.log_tail()),
        }
    }

    pub fn runc(&self) -> Command {
        let mut cmd = Command::new("runc");
        cmd.arg("--root").arg(self.dir().join("oci"));
        cmd
    }

    /// The host pid of the box's berth-init, when its container runs.
    pub fn box_pid(&self, box_id: &str) -> Option<i32> {
        let out = self.runc().args(["state", box_id]).output().ok()?;
        let state: Value = serde_json::from_slice(&out.stdout).ok()?;
        if state["status"] != "running" {
            return None;
        }
        state["pid"].as_i64().map(|p| p as i32).filter(|p| *p > 0)
    }

    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(60);
        format!(
            "--- daemon log (last 60 lines)\n{}",
            lines[from..].join("\n")
        )
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.kill_daemon();
        // A SIGKILLed daemon leaves its box running and its volume mounted (the next
        // daemon would adopt them): end them before the data dir goes.
        crate::common::daemon::end_leftover_boxes(self.dir());
    }
}

// ---------------------------------------------------------------------------------------
// A tiny blocking HTTP/1.1 client: one connection per call, `Connection: close`.

pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    key: &str,
    body: Option<&Value>,
) -> std::io::Result<(u16, Value)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(15)))?;
    stream.set_nodelay(true)?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no end of the response head"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut payload = raw[split + 4..].to_vec();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line: {head}")))?;
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        payload = dechunk(&payload)?;
    }
    let value = if payload.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&payload).map_err(std::io::Error::other)?
    };
    Ok((status, value))
}

pub fn dechunk(mut raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let bad = || std::io::Error::other("bad chunked body");
    let mut out = Vec::new();
    loop {
        let line_end = raw.windows(2).position(|w| w == b"\r\n").ok_or_else(bad)?;
        let size_text = String::from_utf8_lossy(&raw[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| bad())?;
        raw = &raw[line_end + 2..];
        if size == 0 {
            return Ok(out);
        }
        if raw.len() < size + 2 {
            return Err(bad()); // a torn answer: the daemon died mid-way
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

// ---------------------------------------------------------------------------------------

/// A child process killed (and reaped) on drop, unless taken.
pub struct KillOnDrop(pub Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The chaos thread; dropping it stops and joins it.
pub struct Chaos {
    pub done: Arc<AtomicBool>,
    pub handle: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Chaos {
    pub fn stop(&mut self) -> std::thread::Result<Vec<String>> {
        self.done.store(true, Ordering::SeqCst);
        match self.handle.take() {
            Some(handle) => handle.join(),
            None => Ok(Vec::new()),
        }
    }
}

impl Drop for Chaos {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
