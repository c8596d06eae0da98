//! A fake Firecracker API for tests: a hyper server on a Unix socket that records every
//! request, keeps the instance state the real one would (`InstanceStart` → `Running`,
//! `PATCH /vm` → `Paused`/`Running`), and answers chosen paths with a fault.

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

    /// Serves on `socket` (which must not exist).
    pub fn serve_at(socket: &Path) -> FakeApi {
        let listener = UnixListener::bind(socket).unwrap();
        let inner = Arc::new(Mutex::new(Inner {
            seen: Vec::new(),
            state: InstanceState::NotStarted,
            faults: HashMap::new(),
            console: None,
        }));
        let shared = inner.clone();
        let server = tokio::spawn(async move {
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
        FakeApi {
            _dir: None,
            socket: socket.to_path_buf(),
            inner,
            server,
        }
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

    /// On `SendCtrlAltDel`, append the guest kernel's power-off line to `console`.
    pub fn power_off_to(&self, console: &Path) {
        self.inner.lock().unwrap().console = Some(console.to_path_buf());
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
/// then `GET /v1/info` with this protocol version. Aborted on drop.
pub struct FakeGuest {
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeGuest {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeGuest {
    pub fn serve_at(socket: &Path) -> FakeGuest {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let listener = UnixListener::bind(socket).unwrap();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
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
                    let service =
                        hyper::service::service_fn(|req: http::Request<Incoming>| async move {
                            let body = if req.uri().path() == "/v1/info" {
                                serde_json::json!({
                                    "protocol_version": berth_protocol::PROTOCOL_VERSION,
                                    "boot_id": "fake-boot",
                                    "environment": "vm",
                                })
                                .to_string()
                            } else {
                                String::new()
                            };
                            Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                                Bytes::from(body),
                            )))
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
