//! A fake Firecracker API for tests: a hyper server on a Unix socket that records every
//! request, keeps the instance state the real one would (`InstanceStart` → `Running`,
//! `PATCH /vm` → `Paused`/`Running`), and answers chosen paths with a fault.
//!
//! Snapshots as Firecracker 1.x takes them, in its wire format: `PUT /snapshot/create` only
//! of a paused VM, writing the state file (here: the configuration it was booted with, as
//! JSON) and a memory file of the machine's size; `PUT /snapshot/load` only on a fresh
//! Firecracker that nothing configured, reopening every drive and binding the vsock socket
//! where the snapshot says (so a missing drive or a stale socket fails it as it would the
//! real one), then `Running` with `resume_vm`. Refusals are 400 with a `fault_message`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::UnixListener;

use super::api::InstanceState;

/// One request as the fake received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Seen {
    pub method: http::Method,
    pub path: String,
    pub content_type: Option<String>,
    pub body: Option<serde_json::Value>,
}

#[derive(Debug)]
struct Inner {
    seen: Vec<Seen>,
    state: InstanceState,
    faults: HashMap<String, (u16, String)>,
    /// Where `SendCtrlAltDel` makes the "guest" print its power-off line.
    console: Option<PathBuf>,
    /// The body of each configuration `PUT` (`/machine-config`, `/drives/…`, `/vsock`), by
    /// path: what a snapshot saves.
    config: serde_json::Map<String, serde_json::Value>,
    /// The guest a loaded snapshot brings back, served on its vsock socket at load (where
    /// the real one binds it), with this token cell.
    guest_on_load: Option<GuestToken>,
    guests: Vec<FakeGuest>,
}

pub struct FakeApi {
    _dir: Option<tempfile::TempDir>,
    socket: PathBuf,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeApi {
    /// Serves on a socket in a fresh temp dir.
    pub async fn start() -> FakeApi {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let mut fake = FakeApi::serve_at(&socket);
        fake._dir = Some(dir);
        fake
    }

    /// Serves on `socket` as the VMM of a guest whose console is `console`: at
    /// `InstanceStart` the "guest" prints berth-init's ready line there (the host waits for
    /// it before it connects), at `SendCtrlAltDel` its power-off line.
    pub fn serve_booting(socket: &Path, console: &Path) -> FakeApi {
        FakeApi::serve_booting_with(socket, console, |_| {})
    }

    /// [`FakeApi::serve_booting`], set up by `configure` (a fault, the guest a load brings
    /// back) before it answers anything.
    pub fn serve_booting_with(
        socket: &Path,
        console: &Path,
        configure: impl FnOnce(&FakeApi),
    ) -> FakeApi {
        FakeApi::serve_configured(socket, |fake| {
            fake.power_off_to(console);
            configure(fake);
        })
    }

    /// Serves on `socket` (which must not exist).
    pub fn serve_at(socket: &Path) -> FakeApi {
        FakeApi::serve_configured(socket, |_| {})
    }

    /// Serves on `socket` (which must not exist) once `configure` has set the fake up: the
    /// runtime calls the moment the socket exists, and that call waits in the listener's
    /// backlog until then rather than find the fake not yet told what to do.
    fn serve_configured(socket: &Path, configure: impl FnOnce(&FakeApi)) -> FakeApi {
        let listener = UnixListener::bind(socket).unwrap();
        let (configured, wait_configured) = tokio::sync::oneshot::channel::<()>();
        let inner = Arc::new(Mutex::new(Inner {
            seen: Vec::new(),
            state: InstanceState::NotStarted,
            faults: HashMap::new(),
            console: None,
            config: serde_json::Map::new(),
            guest_on_load: None,
            guests: Vec::new(),
        }));
        let shared = inner.clone();
        let server = tokio::spawn(async move {
            let _ = wait_configured.await;
            while let Ok((stream, _)) = listener.accept().await {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, std::convert::Infallible>(answer(&shared, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let fake = FakeApi {
            _dir: None,
            socket: socket.to_path_buf(),
            inner,
            server,
        };
        configure(&fake);
        let _ = configured.send(());
        fake
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Answers `path` with `status` and `body` from now on.
    pub fn fail(&self, path: &str, status: u16, body: &str) {
        self.inner
            .lock()
            .unwrap()
            .faults
            .insert(path.into(), (status, body.into()));
    }

    /// Answers `path` normally again.
    pub fn heal(&self, path: &str) {
        self.inner.lock().unwrap().faults.remove(path);
    }

    /// On `SendCtrlAltDel`, append the guest kernel's power-off line to `console`.
    pub fn power_off_to(&self, console: &Path) {
        self.inner.lock().unwrap().console = Some(console.to_path_buf());
    }

    /// A snapshot loaded from now on brings back a guest holding `token`.
    pub fn guest_on_load(&self, token: GuestToken) {
        self.inner.lock().unwrap().guest_on_load = Some(token);
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }

    pub fn state(&self) -> InstanceState {
        self.inner.lock().unwrap().state
    }
}

async fn answer(
    shared: &Mutex<Inner>,
    req: http::Request<Incoming>,
) -> http::Response<Full<Bytes>> {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = req.into_body().collect().await.unwrap().to_bytes();
    let body = (!bytes.is_empty()).then(|| serde_json::from_slice(&bytes).unwrap());
    let mut inner = shared.lock().unwrap();
    inner.seen.push(Seen {
        method: method.clone(),
        path: path.clone(),
        content_type,
        body: body.clone(),
    });
    if let Some((status, text)) = inner.faults.get(&path) {
        return http::Response::builder()
            .status(*status)
            .body(Full::new(Bytes::from(text.clone())))
            .unwrap();
    }
    let field = |name: &str| {
        body.as_ref()
            .and_then(|b| b.get(name))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    match (method.as_str(), path.as_str()) {
        ("GET", "/") => {
            let info = serde_json::json!({
                "app_name": "Firecracker",
                "id": "fake",
                "state": inner.state,
                "vmm_version": "1.7.0",
            });
            return http::Response::new(Full::new(Bytes::from(info.to_string())));
        }
        ("PUT", "/actions") if field("action_type").as_deref() == Some("InstanceStart") => {
            inner.state = InstanceState::Running;
            // What a booted guest's berth-init says once it listens (the host waits for it).
            if let Some(console) = &inner.console {
                append_line(
                    console,
                    &format!("{} port 2024", berth_protocol::vm::READY_MARK),
                );
            }
        }
        ("PUT", "/actions") if field("action_type").as_deref() == Some("SendCtrlAltDel") => {
            if let Some(console) = &inner.console {
                append_line(console, "[    9.99] reboot: Power down");
            }
        }
        ("PUT", "/snapshot/create") => {
            if let Err(fault) = create_snapshot(&inner, body.as_ref()) {
                return fault_response(&fault);
            }
        }
        ("PUT", "/snapshot/load") => match load_snapshot(&inner, body.as_ref()) {
            Ok((state, uds)) => {
                inner.state = state;
                if let (Some(token), Some(uds)) = (inner.guest_on_load.clone(), uds) {
                    inner.guests.push(FakeGuest::with_token(&uds, token));
                }
            }
            Err(fault) => return fault_response(&fault),
        },
        ("PUT", p) if p == "/machine-config" || p == "/vsock" || p.starts_with("/drives/") => {
            if let Some(body) = &body {
                inner.config.insert(p.to_owned(), body.clone());
            }
        }
        ("PATCH", "/vm") => match field("state").as_deref() {
            Some("Paused") => inner.state = InstanceState::Paused,
            Some("Resumed") => inner.state = InstanceState::Running,
            _ => {}
        },
        _ => {}
    }
    http::Response::builder()
        .status(204)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

/// Firecracker's answer to a refused call.
fn fault_response(message: &str) -> http::Response<Full<Bytes>> {
    http::Response::builder()
        .status(400)
        .body(Full::new(Bytes::from(
            serde_json::json!({ "fault_message": message }).to_string(),
        )))
        .unwrap()
}

fn str_at<'a>(body: Option<&'a serde_json::Value>, pointer: &str) -> Result<&'a str, String> {
    body.and_then(|b| b.pointer(pointer))
        .and_then(|v| v.as_str())
        .ok_or_else(|| format!("An error occurred when deserializing the json body of a request: missing field `{pointer}`"))
}

fn create_snapshot(inner: &Inner, body: Option<&serde_json::Value>) -> Result<(), String> {
    if inner.state != InstanceState::Paused {
        return Err(
            "Operation not allowed: the microVM must be paused to create a snapshot".into(),
        );
    }
    let state_path = str_at(body, "/snapshot_path")?;
    let mem_path = str_at(body, "/mem_file_path")?;
    let mib = inner
        .config
        .get("/machine-config")
        .and_then(|m| m["mem_size_mib"].as_u64())
        .ok_or("Create snapshot error: the microVM has no machine configuration")?;
    let saved = serde_json::Value::Object(inner.config.clone()).to_string();
    std::fs::write(state_path, saved)
        .map_err(|e| format!("Create snapshot error: Cannot write the microVM state: {e}"))?;
    let mem = std::fs::File::create(mem_path)
        .map_err(|e| format!("Create snapshot error: Cannot create the memory file: {e}"))?;
    // The guest's RAM: sparse, as the real one is where the guest never wrote.
    mem.set_len(mib << 20)
        .map_err(|e| format!("Create snapshot error: Cannot write the memory file: {e}"))?;
    Ok(())
}

/// The state after a load and the vsock socket the snapshot's device binds.
fn load_snapshot(
    inner: &Inner,
    body: Option<&serde_json::Value>,
) -> Result<(InstanceState, Option<PathBuf>), String> {
    if inner.state != InstanceState::NotStarted || !inner.config.is_empty() {
        return Err(
            "Loading a microVM snapshot not allowed after configuring boot-specific resources."
                .into(),
        );
    }
    let state_path = str_at(body, "/snapshot_path")?;
    let mem_path = str_at(body, "/mem_backend/backend_path")?;
    if str_at(body, "/mem_backend/backend_type")? != "File" {
        return Err("Load snapshot error: only a File memory backend is faked".into());
    }
    let saved = std::fs::read_to_string(state_path)
        .map_err(|e| format!("Load snapshot error: Cannot open the snapshot file: {e}"))?;
    let saved: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&saved)
        .map_err(|e| format!("Load snapshot error: Cannot deserialize the microVM state: {e}"))?;
    let mib = saved
        .get("/machine-config")
        .and_then(|m| m["mem_size_mib"].as_u64())
        .unwrap_or(0);
    let mem_len = std::fs::metadata(mem_path)
        .map_err(|e| format!("Load snapshot error: Cannot open the memory file: {e}"))?
        .len();
    if mem_len != mib << 20 {
        return Err(format!(
            "Load snapshot error: the memory file holds {mem_len} bytes, the microVM {mib} MiB"
        ));
    }
    let mut vsock = None;
    for (path, config) in &saved {
        if let Some(file) = config.get("path_on_host").and_then(|v| v.as_str()) {
            std::fs::File::open(file).map_err(|e| {
                format!("Load snapshot error: Cannot restore devices: Block({path}): {file}: {e}")
            })?;
        }
        if let Some(uds) = config.get("uds_path").and_then(|v| v.as_str()) {
            if Path::new(uds).exists() {
                return Err(format!("Load snapshot error: Cannot restore devices: Vsock: cannot bind {uds}: Address in use (os error 98)"));
            }
            vsock = Some(PathBuf::from(uds));
        }
    }
    let state = if body.and_then(|b| b["resume_vm"].as_bool()) == Some(true) {
        InstanceState::Running
    } else {
        InstanceState::Paused
    };
    Ok((state, vsock))
}

/// Appends `line` to the fake guest's console log.
fn append_line(console: &Path, line: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(console)
        .unwrap();
    writeln!(file, "{line}").unwrap();
}

/// Plays berth-init behind a hybrid vsock socket: answers `CONNECT <port>\n` with `OK`,
/// then `GET /v1/info` with this protocol version. With a token ([`FakeGuest::with_token`])
/// it refuses any other with 401 and swaps it on `POST /v1/boot/token`, as berth-init
/// does; the token lives in the caller's cell, so a "restored" guest keeps it. Aborted on
/// drop.
#[derive(Debug)]
pub struct FakeGuest {
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeGuest {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// The token a fake guest accepts (`None`: any).
pub type GuestToken = Arc<Mutex<Option<String>>>;

impl FakeGuest {
    pub fn serve_at(socket: &Path) -> FakeGuest {
        FakeGuest::with_token(socket, Arc::new(Mutex::new(None)))
    }

    pub fn with_token(socket: &Path, token: GuestToken) -> FakeGuest {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let listener = UnixListener::bind(socket).unwrap();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let token = token.clone();
                tokio::spawn(async move {
                    let mut stream = tokio::io::BufReader::new(stream);
                    let mut line = String::new();
                    if stream.read_line(&mut line).await.is_err() || !line.starts_with("CONNECT ") {
                        return;
                    }
                    if stream
                        .get_mut()
                        .write_all(b"OK 1073741824\n")
                        .await
                        .is_err()
                    {
                        return;
                    }
                    let service = hyper::service::service_fn(move |req| {
                        let token = token.clone();
                        async move { Ok::<_, std::convert::Infallible>(guest_answer(&token, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FakeGuest { server }
    }
}

async fn guest_answer(
    token: &GuestToken,
    req: http::Request<Incoming>,
) -> http::Response<Full<Bytes>> {
    let presented = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let path = req.uri().path().to_owned();
    let bytes = req.into_body().collect().await.unwrap().to_bytes();
    let mut current = token.lock().unwrap();
    if current.is_some() && *current != presented {
        return http::Response::builder()
            .status(401)
            .body(Full::new(Bytes::from(
                r#"{"error":{"code":"unauthorized","message":"missing or wrong bearer token"}}"#,
            )))
            .unwrap();
    }
    let body = match path.as_str() {
        "/v1/info" => serde_json::json!({
            "protocol_version": berth_protocol::PROTOCOL_VERSION,
            "boot_id": "fake-boot",
            "environment": "vm",
        })
        .to_string(),
        "/v1/boot/token" => {
            let request: berth_protocol::guest::BootTokenRequest =
                serde_json::from_slice(&bytes).unwrap();
            *current = Some(request.token);
            return http::Response::builder()
                .status(204)
                .body(Full::new(Bytes::new()))
                .unwrap();
        }
        _ => String::new(),
    };
    http::Response::new(Full::new(Bytes::from(body)))
}
