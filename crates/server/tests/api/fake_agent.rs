//! The agent of a fake box: an in-process HTTP server on the box's Unix socket that checks
//! the boot token like `berth-init` does and answers exec, files and the harness calls of
//! protocol v2, with a [`FakeHarness`] and files that outlive boots like a volume, and the
//! service calls of protocol 7 for the services its boot was given.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, Query, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use berth_protocol::guest::{ExecFrame, ExecRequest, FileEntry, FileKind, FileList, FileQuery};
use berth_protocol::harness::{DeliverRequest, DeliverResponse, GuestEvent};
use berth_protocol::process::{OutputStream, ProcessFrame};
use berth_protocol::service::{ServiceConfig, ServiceInfo, ServiceList, ServiceState};
use berth_protocol::{ErrorBody, ErrorCode};
use futures_util::StreamExt;
use http::StatusCode;

/// Files of every box, by path: they outlive boots, like a volume.
pub(crate) type Volume = Arc<Mutex<HashMap<String, Vec<u8>>>>;

/// The harness side of a fake box's volume: what it received, what it said.
#[derive(Debug)]
pub struct FakeHarness {
    pub journal: Mutex<Journal>,
    /// The newest event seq: wakes open event streams.
    changed: tokio::sync::watch::Sender<u64>,
    /// The next this many deliveries answer 503 (to test retries).
    pub fail_deliveries: AtomicUsize,
    /// The argv of every `xdotool` and `scrot` run, in order (a desktop's programs).
    pub desktop_runs: Mutex<Vec<Vec<String>>>,
}

#[derive(Debug, Default)]
pub struct Journal {
    pub seen: std::collections::HashSet<String>,
    /// Message contents in the order the harness got them (each once).
    pub received: Vec<String>,
    pub events: Vec<GuestEvent>,
}

impl Default for FakeHarness {
    fn default() -> Self {
        FakeHarness {
            journal: Mutex::default(),
            changed: tokio::sync::watch::Sender::new(0),
            fail_deliveries: AtomicUsize::new(0),
            desktop_runs: Mutex::default(),
        }
    }
}

impl FakeHarness {
    pub(crate) fn emit(&self, kind: &str, data: serde_json::Value) {
        let seq = {
            let mut journal = self.journal.lock().unwrap();
            let seq = journal.events.len() as u64 + 1;
            journal.events.push(GuestEvent {
                seq,
                kind: kind.into(),
                data,
                at_ms: 1,
            });
            seq
        };
        self.changed.send_replace(seq);
    }

    pub fn received(&self) -> Vec<String> {
        self.journal.lock().unwrap().received.clone()
    }
}

/// What a fake box keeps only in memory: its token, a counter, and its services (each
/// running from the start, its log one line).
#[derive(Debug, Clone, Default)]
pub struct Memory {
    pub(crate) token: Arc<Mutex<String>>,
    pub(crate) counter: Arc<AtomicUsize>,
    pub(crate) services: Arc<Mutex<Vec<ServiceInfo>>>,
}

impl Memory {
    /// A cold boot's memory: `token`, and `services` started (and ready) now.
    pub(crate) fn booted(token: &str, services: &[ServiceConfig]) -> Memory {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let services = services
            .iter()
            .enumerate()
            .map(|(i, config)| ServiceInfo {
                name: config.name.clone(),
                state: ServiceState::Running,
                pid: Some(100 + i as u32),
                restarts: 0,
                started_at_ms: Some(now_ms),
                ready_at_ms: Some(now_ms),
                last_exit: None,
                reason: None,
                log_end: service_log(&config.name).len() as u64,
                log_tail: None,
                keep_awake: config.keep_awake,
                after: config.after.clone(),
            })
            .collect();
        Memory {
            token: Arc::new(Mutex::new(token.to_owned())),
            counter: Arc::default(),
            services: Arc::new(Mutex::new(services)),
        }
    }
}

/// A fake service's whole log.
fn service_log(name: &str) -> String {
    format!("hello from {name}\n")
}

#[derive(Clone)]
struct Agent {
    memory: Memory,
    volume: Volume,
    harness: Arc<FakeHarness>,
    /// Turns `false` when the box is stopped: open exec streams end then.
    alive: tokio::sync::watch::Receiver<bool>,
}

pub(crate) fn agent(
    memory: Memory,
    volume: Volume,
    harness: Arc<FakeHarness>,
    alive: tokio::sync::watch::Receiver<bool>,
) -> Router {
    let state = Agent {
        memory,
        volume,
        harness,
        alive,
    };
    Router::new()
        .route(
            "/v1/info",
            get(|| async { Json(serde_json::json!({"protocol_version": berth_protocol::PROTOCOL_VERSION, "boot_id": "fake"})) }),
        )
        .route("/v1/exec", post(exec))
        .route("/v1/boot/token", post(rotate_token))
        .route("/v1/messages", post(deliver))
        .route("/v1/events", get(events))
        .route(
            "/v1/files",
            get(read).put(write).delete(remove),
        )
        .route("/v1/files/stat", get(stat))
        .route("/v1/files/list", get(list))
        .route("/v1/files/mkdir", post(|| async { StatusCode::NO_CONTENT }))
        .route("/v1/services", get(services))
        .route("/v1/services/{name}/logs", get(service_logs))
        .route("/v1/services/{name}/restart", post(service_restart))
        .layer(middleware::from_fn_with_state(state.clone(), check_token))
        .with_state(state)
}

fn error(status: StatusCode, code: ErrorCode, message: &str) -> Response {
    (status, Json(ErrorBody::new(code, message))).into_response()
}

async fn check_token(State(agent): State<Agent>, req: Request, next: Next) -> Response {
    let expected = format!("Bearer {}", agent.memory.token.lock().unwrap());
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
/// `POST /v1/boot/token`: the new token at once, the old one refused from then on.
async fn rotate_token(State(agent): State<Agent>, body: Bytes) -> StatusCode {
    let req: berth_protocol::guest::BootTokenRequest = serde_json::from_slice(&body).unwrap();
    *agent.memory.token.lock().unwrap() = req.token;
    StatusCode::NO_CONTENT
}

async fn exec(State(agent): State<Agent>, body: Bytes) -> Response {
    let req: ExecRequest = serde_json::from_slice(&body).unwrap();
    let mut frames = vec![ExecFrame::Started { pid: 42 }];
    if let Some(desktop) = desktop(&agent, &req) {
        frames.extend(desktop);
        return ndjson(&frames);
    }
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
        "count" => {
            let n = agent.memory.counter.fetch_add(1, Ordering::SeqCst) + 1;
            frames.push(ExecFrame::Stdout {
                data: format!("{n}\n").into_bytes(),
            });
            frames.push(ExecFrame::Exit {
                code: Some(0),
                signal: None,
                timed_out: false,
            });
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
    ndjson(&frames)
}

fn ndjson(frames: &[ExecFrame]) -> Response {
    let body: String = frames
        .iter()
        .map(|f| serde_json::to_string(f).unwrap() + "\n")
        .collect();
    ([("content-type", "application/x-ndjson")], body).into_response()
}

/// A desktop's programs, run on `DISPLAY=:0`: `scrot … FILE` writes [`FAKE_PNG`] to FILE,
/// `xdotool` prints a 1024x768 screen with the pointer at 7,9, fails to type `fail-me`, and
/// knows no key `Nope`.
/// Recorded.
fn desktop(agent: &Agent, req: &ExecRequest) -> Option<Vec<ExecFrame>> {
    let program = req.argv[0].as_str();
    if !matches!(program, "xdotool" | "scrot") {
        return None;
    }
    assert_eq!(req.env.get("DISPLAY").map(String::as_str), Some(":0"));
    agent
        .harness
        .desktop_runs
        .lock()
        .unwrap()
        .push(req.argv.clone());
    let out = |stdout: &[u8]| ExecFrame::Stdout {
        data: stdout.to_vec(),
    };
    let exit = |code| ExecFrame::Exit {
        code: Some(code),
        signal: None,
        timed_out: false,
    };
    Some(match (program, req.argv.get(1).map(String::as_str)) {
        ("scrot", _) => {
            let file = req.argv.last().unwrap().clone();
            agent.volume.lock().unwrap().insert(file, FAKE_PNG.to_vec());
            vec![exit(0)]
        }
        (_, Some("getdisplaygeometry")) => vec![out(b"1024 768\n"), exit(0)],
        (_, Some("getmouselocation")) => vec![out(b"X=7\nY=9\nSCREEN=0\nWINDOW=3\n"), exit(0)],
        // As bookworm's xdotool does: it says so, ignores the key, and exits 0.
        (_, Some("key")) if req.argv.iter().any(|a| a == "Nope") => vec![
            ExecFrame::Stderr {
                data: b"(symbol) No such key name 'Nope'. Ignoring it.\n".to_vec(),
            },
            exit(0),
        ],
        _ if req.argv.iter().any(|a| a == "fail-me") => vec![
            ExecFrame::Stderr {
                data: b"xdo: cannot type\n".to_vec(),
            },
            exit(1),
        ],
        _ => vec![exit(0)],
    })
}

/// What the fake `scrot` writes: a PNG's signature, then bytes that are not UTF-8.
pub const FAKE_PNG: &[u8] = b"\x89PNG\r\n\x1a\n\xff\xfe\x00fake";

async fn services(State(agent): State<Agent>) -> Json<ServiceList> {
    Json(ServiceList {
        services: agent.memory.services.lock().unwrap().clone(),
    })
}

fn no_service(name: &str) -> Response {
    error(
        StatusCode::NOT_FOUND,
        ErrorCode::NotFound,
        &format!("no service {name:?}"),
    )
}

/// The service's one line from `offset`, then the end (`follow` is not kept open: nothing
/// more would come).
async fn service_logs(
    State(agent): State<Agent>,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if !agent
        .memory
        .services
        .lock()
        .unwrap()
        .iter()
        .any(|s| s.name == name)
    {
        return no_service(&name);
    }
    let offset: usize = q.get("offset").and_then(|o| o.parse().ok()).unwrap_or(0);
    let log = service_log(&name).into_bytes();
    let frame = ProcessFrame::Output {
        stream: OutputStream::Stdout,
        offset: offset as u64,
        data: log.get(offset..).unwrap_or_default().to_vec(),
    };
    let body = serde_json::to_string(&frame).unwrap() + "\n";
    ([("content-type", "application/x-ndjson")], body).into_response()
}

async fn service_restart(State(agent): State<Agent>, Path(name): Path<String>) -> Response {
    let mut services = agent.memory.services.lock().unwrap();
    let Some(service) = services.iter_mut().find(|s| s.name == name) else {
        return no_service(&name);
    };
    service.restarts += 1;
    service.pid = service.pid.map(|pid| pid + 1000);
    Json(service.clone()).into_response()
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

async fn remove(State(agent): State<Agent>, Query(q): Query<FileQuery>) -> StatusCode {
    agent.volume.lock().unwrap().remove(&q.path);
    StatusCode::NO_CONTENT
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
        owner: None,
        group: None,
        symlink_target: None,
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

/// Journals the id; a new message is "written to the harness", which answers it.
async fn deliver(State(agent): State<Agent>, body: Bytes) -> Response {
    let req: DeliverRequest = serde_json::from_slice(&body).unwrap();
    let failing = agent
        .harness
        .fail_deliveries
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok();
    if failing {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unavailable,
            "harness busy",
        );
    }
    let harness = &agent.harness;
    let duplicate = {
        let mut journal = harness.journal.lock().unwrap();
        let new = journal.seen.insert(req.id.clone());
        if new {
            journal.received.push(req.content.clone());
        }
        !new
    };
    if !duplicate {
        let user =
            serde_json::json!({"type":"user","message":{"role":"user","content":req.content}});
        harness.emit("user", user);
        harness.emit(
            "assistant",
            serde_json::json!({"type":"assistant","text":format!("echo: {}", req.content)}),
        );
        harness.emit(
            "result",
            serde_json::json!({"type":"result","result":req.content}),
        );
    }
    Json(DeliverResponse {
        id: req.id,
        duplicate,
    })
    .into_response()
}

#[derive(Debug, serde::Deserialize)]
struct After {
    after: u64,
}

/// Every event after `after`, then new ones, until the box stops.
async fn events(State(agent): State<Agent>, Query(q): Query<After>) -> Response {
    let changed = agent.harness.changed.subscribe();
    let state = (q.after, changed, agent.alive.clone(), agent.harness.clone());
    let stream = futures_util::stream::unfold(
        state,
        |(after, mut changed, mut alive, harness)| async move {
            loop {
                let new: Vec<GuestEvent> = harness
                    .journal
                    .lock()
                    .unwrap()
                    .events
                    .iter()
                    .filter(|e| e.seq > after)
                    .cloned()
                    .collect();
                if let Some(last) = new.last().map(|e| e.seq) {
                    let lines: String = new
                        .iter()
                        .map(|e| serde_json::to_string(e).unwrap() + "\n")
                        .collect();
                    return Some((
                        Ok::<_, std::io::Error>(lines),
                        (last, changed, alive, harness),
                    ));
                }
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return None; },
                    _ = alive.wait_for(|alive| !alive) => return None,
                }
            }
        },
    );
    axum::body::Body::from_stream(stream).into_response()
}
