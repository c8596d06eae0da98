//! A fake runtime whose boxes are in-process fake agents on Unix sockets: the lifecycle
//! (wake once, fresh token per boot, stop, delete, reconcile, shutdown) without root.
//! Each agent checks the boot token like `berth-init` does.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use axum::body::Bytes;
use axum::extract::{Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use berth_protocol::guest::{ExecFrame, ExecRequest, FileEntry, FileKind, FileList, FileQuery};
use berth_protocol::{BoxId, ErrorBody, ErrorCode};
use berth_runtime::{
    BootToken, BoxSpec, Capabilities, GuestAddr, GuestClient, Runtime, RuntimeError, RuntimeStatus,
};
use futures_util::StreamExt;
use http::StatusCode;

/// Files of every box, by path: they outlive boots, like a volume.
type Volume = Arc<Mutex<HashMap<String, Vec<u8>>>>;

/// A fake box's agent task, and the switch that ends its open exec streams.
type RunningAgent = (
    tokio::task::JoinHandle<()>,
    tokio::sync::watch::Sender<bool>,
);

#[derive(Debug, Default)]
pub struct FakeRuntime {
    dir: PathBuf,
    pub starts: AtomicUsize,
    pub tokens: Mutex<Vec<String>>,
    pub stopped: Mutex<Vec<BoxId>>,
    pub removed: Mutex<Vec<BoxId>>,
    /// What `list()` reports beyond the boxes it runs (leftovers for reconcile).
    pub orphans: Vec<BoxId>,
    agents: Mutex<HashMap<BoxId, RunningAgent>>,
    volume: Volume,
}

impl FakeRuntime {
    pub fn new(dir: PathBuf) -> FakeRuntime {
        FakeRuntime::with_orphans(dir, Vec::new())
    }

    pub fn with_orphans(dir: PathBuf, orphans: Vec<BoxId>) -> FakeRuntime {
        FakeRuntime {
            dir,
            orphans,
            ..Default::default()
        }
    }

    fn socket(&self, id: &BoxId) -> PathBuf {
        self.dir.join(format!("{id}.sock"))
    }

    /// The box's processes die (the runtime sees it stopped; nobody told the daemon).
    pub fn crash(&self, id: &BoxId) {
        self.kill(id);
    }

    fn kill(&self, id: &BoxId) {
        if let Some((agent, alive)) = self.agents.lock().unwrap().remove(id) {
            agent.abort();
            let _ = alive.send(false);
        }
        let _ = std::fs::remove_file(self.socket(id));
    }
}

#[async_trait]
impl Runtime for FakeRuntime {
    fn name(&self) -> &'static str {
        "fake"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            pause: false,
            snapshot: false,
        }
    }

    async fn start(&self, spec: &BoxSpec) -> Result<GuestClient, RuntimeError> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        self.tokens
            .lock()
            .unwrap()
            .push(spec.boot_token.as_str().to_owned());
        // A cold start takes a while: concurrent wakes overlap here.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let path = self.socket(&spec.id);
        let _ = std::fs::remove_file(&path);
        let listener =
            tokio::net::UnixListener::bind(&path).map_err(|source| RuntimeError::Io {
                action: "bind",
                path: path.clone(),
                source,
            })?;
        let (alive, alive_rx) = tokio::sync::watch::channel(true);
        let agent = agent(
            spec.boot_token.as_str().to_owned(),
            self.volume.clone(),
            alive_rx,
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, agent).await;
        });
        self.agents
            .lock()
            .unwrap()
            .insert(spec.id.clone(), (task, alive));
        Ok(GuestClient::new(
            GuestAddr::Unix(path),
            spec.boot_token.clone(),
        ))
    }

    async fn stop(&self, id: &BoxId, _grace: Duration) -> Result<(), RuntimeError> {
        self.kill(id);
        self.stopped.lock().unwrap().push(id.clone());
        Ok(())
    }

    async fn pause(&self, _id: &BoxId) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unsupported {
            backend: "fake",
            operation: "pause",
        })
    }

    async fn resume(&self, _id: &BoxId) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unsupported {
            backend: "fake",
            operation: "resume",
        })
    }

    async fn status(&self, id: &BoxId) -> Result<RuntimeStatus, RuntimeError> {
        Ok(if self.agents.lock().unwrap().contains_key(id) {
            RuntimeStatus::Running
        } else {
            RuntimeStatus::Stopped
        })
    }

    fn channel(&self, id: &BoxId, token: &BootToken) -> GuestClient {
        GuestClient::new(GuestAddr::Unix(self.socket(id)), token.clone())
    }

    async fn list(&self) -> Result<Vec<BoxId>, RuntimeError> {
        let mut ids: Vec<BoxId> = self.agents.lock().unwrap().keys().cloned().collect();
        ids.extend(self.orphans.iter().cloned());
        Ok(ids)
    }

    async fn remove(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.kill(id);
        self.removed.lock().unwrap().push(id.clone());
        Ok(())
    }
}

#[derive(Clone)]
struct Agent {
    token: String,
    volume: Volume,
    /// Turns `false` when the box is stopped: open exec streams end then.
    alive: tokio::sync::watch::Receiver<bool>,
}

fn agent(token: String, volume: Volume, alive: tokio::sync::watch::Receiver<bool>) -> Router {
    let state = Agent {
        token,
        volume,
        alive,
    };
    Router::new()
        .route(
            "/v1/info",
            get(|| async { Json(serde_json::json!({"protocol_version": 1, "boot_id": "fake"})) }),
        )
        .route("/v1/exec", post(exec))
        .route(
            "/v1/files",
            get(read)
                .put(write)
                .delete(|| async { StatusCode::NO_CONTENT }),
        )
        .route("/v1/files/stat", get(stat))
        .route("/v1/files/list", get(list))
        .route("/v1/files/mkdir", post(|| async { StatusCode::NO_CONTENT }))
        .layer(middleware::from_fn_with_state(state.clone(), check_token))
        .with_state(state)
}

fn error(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    (status, Json(ErrorBody::new(code, message))).into_response()
}

async fn check_token(State(agent): State<Agent>, req: Request, next: Next) -> Response {
    let expected = format!("Bearer {}", agent.token);
    if req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        != Some(expected.as_str())
    {
        return error(
            StatusCode::UNAUTHORIZED,
            ErrorCode::Unauthorized,
            "wrong boot token",
        );
    }
    next.run(req).await
}

/// Echoes `<argv> as <user>`; `fail` exits 3 with a line on stderr; `missing` is an
/// error frame; `hang` runs until the box stops.
async fn exec(State(agent): State<Agent>, body: Bytes) -> Response {
    let req: ExecRequest = serde_json::from_slice(&body).unwrap();
    let mut frames = vec![ExecFrame::Started { pid: 42 }];
    match req.argv[0].as_str() {
        "hang" => {
            let started = serde_json::to_string(&frames[0]).unwrap() + "\n";
            let mut alive = agent.alive.clone();
            let stream = futures_util::stream::once(
                async move { Ok::<_, std::io::Error>(started) },
            )
            .chain(futures_util::stream::once(async move {
                let _ = alive.wait_for(|alive| !alive).await;
                Err(std::io::Error::other("the box stopped"))
            }));
            return axum::body::Body::from_stream(stream).into_response();
        }
        "missing" => frames.push(ExecFrame::Error {
            code: ErrorCode::NotFound,
            message: "no such program".into(),
        }),
        "fail" => {
            frames.push(ExecFrame::Stderr {
                data: b"failing\n".to_vec(),
            });
            frames.push(ExecFrame::Exit {
                code: Some(3),
                signal: None,
                timed_out: false,
            });
        }
        _ => {
            let line = format!("{} as {}\n", req.argv.join(" "), req.user.as_str());
            frames.push(ExecFrame::Stdout {
                data: line.into_bytes(),
            });
            frames.push(ExecFrame::Exit {
                code: Some(0),
                signal: None,
                timed_out: false,
            });
        }
    }
    let body: String = frames
        .iter()
        .map(|f| serde_json::to_string(f).unwrap() + "\n")
        .collect();
    ([("content-type", "application/x-ndjson")], body).into_response()
}

fn forbidden(q: &FileQuery) -> Option<Response> {
    (q.path.starts_with("/root/") && q.user == berth_protocol::guest::BoxUser::User).then(|| {
        error(
            StatusCode::FORBIDDEN,
            ErrorCode::PermissionDenied,
            "root only",
        )
    })
}

async fn read(State(agent): State<Agent>, Query(q): Query<FileQuery>) -> Response {
    if let Some(denied) = forbidden(&q) {
        return denied;
    }
    match agent.volume.lock().unwrap().get(&q.path) {
        Some(data) => data.clone().into_response(),
        None => error(StatusCode::NOT_FOUND, ErrorCode::NotFound, "no such file"),
    }
}

async fn write(State(agent): State<Agent>, Query(q): Query<FileQuery>, body: Bytes) -> Response {
    if let Some(denied) = forbidden(&q) {
        return denied;
    }
    agent.volume.lock().unwrap().insert(q.path, body.to_vec());
    StatusCode::NO_CONTENT.into_response()
}

fn entry(path: &str, data: &[u8]) -> FileEntry {
    let name = path.rsplit('/').next().unwrap_or_default().to_owned();
    FileEntry {
        name,
        kind: FileKind::File,
        size: data.len() as u64,
        mode: 0o644,
        mtime: 0,
    }
}

async fn stat(State(agent): State<Agent>, Query(q): Query<FileQuery>) -> Response {
    match agent.volume.lock().unwrap().get(&q.path) {
        Some(data) => Json(entry(&q.path, data)).into_response(),
        None => error(StatusCode::NOT_FOUND, ErrorCode::NotFound, "no such file"),
    }
}

async fn list(State(agent): State<Agent>, Query(q): Query<FileQuery>) -> Json<FileList> {
    let prefix = format!("{}/", q.path.trim_end_matches('/'));
    let volume = agent.volume.lock().unwrap();
    let entries = volume
        .iter()
        .filter(|(path, _)| path.starts_with(&prefix) && !path[prefix.len()..].contains('/'))
        .map(|(path, data)| entry(path, data))
        .collect();
    Json(FileList { entries })
}
