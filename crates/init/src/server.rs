//! HTTP/1.1 on the agent socket: authentication, the version header, routing. Handlers
//! parse, authorize and call one typed operation; errors become a status in
//! [`crate::error`].

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use berth_protocol::guest::{FileMove, Info, WriteMode, MAX_FILE_BYTES};
use berth_protocol::ports::PORT_UPGRADE;
use berth_protocol::process::Busy;
use berth_protocol::terminal::{OFFSET_HEADER, TERMINAL_UPGRADE};
use berth_protocol::version::VERSION_HEADER;
use berth_protocol::{negotiate, PROTOCOL_VERSION};
use bytes::Bytes;
use http::{header, HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::service::service_fn;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::{mpsc, Notify};

use crate::archive;
use crate::boot::BootRecord;
use crate::boot_token::BootTokens;
use crate::error::ApiError;
use crate::exec::Executor;
use crate::files::{self, Chunk, FsIdentity};
use crate::harness::{self, Harness};
use crate::listener::Listener;
use crate::ports;
use crate::process::{self, Processes};
use crate::query::{
    after_query, checked_path, close_query, file_query, follow_query, offset_query, write_mode,
};
use crate::service::{self, Services};
use crate::terminal::Terminals;
use crate::watch;

/// Largest `POST /v1/exec` body (the request carries the stdin text).
const MAX_EXEC_BODY: u64 = 64 * 1024 * 1024;
/// Largest `POST /v1/messages` body.
const MAX_MESSAGE_BODY: u64 = 4 * 1024 * 1024;
/// Largest body of a terminal call (a command line and its environment).
const MAX_CONTROL_BODY: u64 = 1024 * 1024;

/// Everything the handlers share.
#[derive(Debug)]
pub struct Agent {
    pub token: BootTokens,
    pub boot: BootRecord,
    pub exec: Arc<Executor>,
    pub harness: Arc<Harness>,
    pub terminals: Arc<Terminals>,
    pub processes: Arc<Processes>,
    pub services: Arc<Services>,
    pub shutdown: Arc<Notify>,
}

impl Agent {
    fn info(&self) -> Info {
        Info {
            protocol_version: PROTOCOL_VERSION,
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            boot_id: self.boot.boot_id.clone(),
            uptime_ms: u64::try_from(self.boot.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            environment: self.boot.environment,
            phases: self.boot.phases.clone(),
        }
    }
}

/// Accepts connections forever (on the run dir's Unix socket or on vsock); each is served
/// on its own task.
pub async fn serve<L: Listener>(listener: L, agent: Arc<Agent>) {
    loop {
        let stream = match listener.accept_conn().await {
            Ok(stream) => stream,
            Err(err) => {
                eprintln!("berth-init: accept failed: {err}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        let agent = agent.clone();
        let channel = L::descriptor_channel(&stream).and_then(ports::HandoffChannel::of);
        tokio::spawn(async move {
            let service = service_fn(move |mut req: Request<Incoming>| {
                if let Some(channel) = &channel {
                    req.extensions_mut().insert(channel.clone());
                }
                handle(agent.clone(), req)
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades()
                .await;
        });
    }
}

async fn handle(agent: Arc<Agent>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    Ok(route(&agent, req).await.unwrap_or_else(|err| {
        let body = serde_json::to_vec(&err.body()).unwrap_or_default();
        respond(err.status(), "application/json", Body::full(body))
    }))
}

async fn route(agent: &Arc<Agent>, mut req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    authorize(&agent.token, req.headers())?;
    check_version(req.headers())?;
    let upgrade = req
        .headers()
        .contains_key(header::UPGRADE)
        .then(|| hyper::upgrade::on(&mut req));
    let (parts, body) = req.into_parts();
    let query = parts.uri.query();
    if let Some(rest) = parts.uri.path().strip_prefix("/v1/processes/") {
        return process_route(agent, &parts, rest, body).await;
    }
    if let Some(rest) = parts.uri.path().strip_prefix("/v1/services/") {
        return service_route(agent, &parts, rest).await;
    }
    if let Some(rest) = parts.uri.path().strip_prefix("/v1/terminals/") {
        return terminal_route(agent, &parts, rest, body, upgrade).await;
    }
    if let Some(port) = parts.uri.path().strip_prefix("/v1/ports/") {
        if let (Some(port), &Method::POST) = (ports::handoff_of(port), &parts.method) {
            ports::hand_over(port, parts.extensions.get()).await?;
            return Ok(no_content());
        }
        if parts.method != Method::GET {
            return Err(no_route(&parts));
        }
        let stream = ports::connect(port).await?;
        let upgrade = upgrade_of(&parts, upgrade, PORT_UPGRADE)?;
        tokio::spawn(ports::splice(upgrade, stream));
        return Ok(switching(PORT_UPGRADE));
    }
    match (&parts.method, parts.uri.path()) {
        (&Method::GET, "/v1/info") => json(&agent.info()),
        (&Method::POST, "/v1/exec") => {
            let bytes = collect(body, &parts.headers, MAX_EXEC_BODY).await?;
            let prepared = agent.exec.prepare(&bytes)?;
            Ok(respond(
                StatusCode::OK,
                "application/x-ndjson",
                Body::Stream(agent.exec.start(prepared)),
            ))
        }
        (&Method::GET, "/v1/files") => {
            let read = files::read(file_query(query)?).await?;
            Ok(respond(
                StatusCode::OK,
                "application/octet-stream",
                Body::Sized {
                    chunks: read.chunks,
                    len: read.len,
                },
            ))
        }
        (&Method::PUT, "/v1/files") => {
            write(file_query(query)?, write_mode(query)?, body, &parts.headers).await?;
            Ok(no_content())
        }
        (&Method::DELETE, "/v1/files") => {
            let q = file_query(query)?;
            files::run_as(q.user, move || files::remove(q.path.as_ref(), q.recursive)).await?;
            Ok(no_content())
        }
        (&Method::GET, "/v1/files/archive") => {
            let chunks = archive::read(file_query(query)?).await?;
            Ok(respond(
                StatusCode::OK,
                "application/x-tar",
                Body::Fallible(chunks),
            ))
        }
        (&Method::PUT, "/v1/files/archive") => {
            json(&write_archive(file_query(query)?, body).await?)
        }
        (&Method::GET, "/v1/files/watch") => {
            let q = file_query(query)?;
            let events = watch::open(q).await?;
            Ok(respond(
                StatusCode::OK,
                "application/x-ndjson",
                Body::Stream(events),
            ))
        }
        (&Method::GET, "/v1/files/list") => {
            let q = file_query(query)?;
            json(&files::run_as(q.user, move || files::list(q.path.as_ref())).await?)
        }
        (&Method::GET, "/v1/files/stat") => {
            let q = file_query(query)?;
            json(&files::run_as(q.user, move || files::stat(q.path.as_ref())).await?)
        }
        (&Method::POST, "/v1/files/move") => {
            let bytes = collect(body, &parts.headers, MAX_CONTROL_BODY).await?;
            let req: FileMove = serde_json::from_slice(&bytes).map_err(ApiError::BadJson)?;
            let (from, to) = (checked_path(req.from)?, checked_path(req.to)?);
            json(&files::run_as(req.user, move || files::rename(from.as_ref(), to.as_ref())).await?)
        }
        (&Method::POST, "/v1/files/mkdir") => {
            let q = file_query(query)?;
            files::run_as(q.user, move || files::mkdir(q.path.as_ref(), q.recursive)).await?;
            Ok(no_content())
        }
        (&Method::POST, "/v1/messages") => {
            let bytes = collect(body, &parts.headers, MAX_MESSAGE_BODY).await?;
            let request = serde_json::from_slice(&bytes).map_err(ApiError::BadJson)?;
            json(&harness::deliver::deliver(&agent.harness, request).await?)
        }
        (&Method::GET, "/v1/events") => {
            let events = harness::stream::open(agent.harness.clone(), after_query(query)?)?;
            Ok(respond(
                StatusCode::OK,
                "application/x-ndjson",
                Body::Stream(events),
            ))
        }
        (&Method::GET, "/v1/harness") => json(&agent.harness.status()),
        (&Method::GET, "/v1/busy") => json(&Busy {
            terminals: agent.terminals.busy(),
            processes: agent.processes.busy(),
            services: agent.services.busy(),
        }),
        (&Method::GET, "/v1/services") => json(&agent.services.list()),
        (&Method::POST, "/v1/processes") => {
            let follow = follow_query(query)?;
            let bytes = collect(body, &parts.headers, MAX_EXEC_BODY).await?;
            let started = agent.processes.start(&bytes)?;
            if !follow {
                return json(&started.info());
            }
            Ok(respond(
                StatusCode::OK,
                "application/x-ndjson",
                Body::Stream(process::started_and_followed(started)),
            ))
        }
        (&Method::GET, "/v1/processes") => json(&agent.processes.list()),
        (&Method::GET, "/v1/terminals") => json(&agent.terminals.list()),
        (&Method::POST, "/v1/terminals") => {
            let bytes = collect(body, &parts.headers, MAX_CONTROL_BODY).await?;
            json(&agent.terminals.open(&bytes)?)
        }
        (&Method::POST, "/v1/boot/token") => {
            let bytes = collect(body, &parts.headers, MAX_CONTROL_BODY).await?;
            agent.token.rotate(&bytes, agent.boot.environment)?;
            Ok(no_content())
        }
        (&Method::POST, "/v1/wake/reply") => {
            crate::wake::reply(&collect(body, &parts.headers, MAX_CONTROL_BODY).await?)
                .map(|()| no_content())
        }
        (&Method::POST, "/v1/shutdown") => {
            agent.shutdown.notify_one();
            Ok(respond(
                StatusCode::ACCEPTED,
                "application/json",
                Body::full(b"{}".to_vec()),
            ))
        }
        _ => Err(no_route(&parts)),
    }
}

/// The calls under `/v1/processes/{id}`.
async fn process_route(
    agent: &Arc<Agent>,
    parts: &http::request::Parts,
    rest: &str,
    mut body: Incoming,
) -> Result<Response<Body>, ApiError> {
    let (id, verb) = rest.split_once('/').unwrap_or((rest, ""));
    let process = agent.processes.get(id)?;
    match (&parts.method, verb) {
        (&Method::GET, "output") => Ok(respond(
            StatusCode::OK,
            "application/x-ndjson",
            Body::Stream(process::follow(
                process,
                offset_query(parts.uri.query())?.unwrap_or(0),
            )),
        )),
        (&Method::POST, "signal") => {
            process.signal(&collect(body, &parts.headers, MAX_CONTROL_BODY).await?)?;
            Ok(no_content())
        }
        (&Method::POST, "stdin") => {
            let close = close_query(parts.uri.query())?;
            let (tx, rx) = mpsc::channel(4);
            let writer = {
                let process = process.clone();
                tokio::spawn(async move { process::write_stdin(&process, rx, close).await })
            };
            // Once the writer has given up, the rest of the body is still read and dropped,
            // so the client sees the answer rather than a broken pipe.
            let mut failed = None;
            while let Some(frame) = body.frame().await {
                match frame.map(Frame::into_data) {
                    Err(err) => {
                        failed = Some(ApiError::Body(err));
                        break;
                    }
                    Ok(Ok(data)) => {
                        let _ = tx.send(data).await;
                    }
                    Ok(Err(_trailers)) => {}
                }
            }
            drop(tx);
            let written = writer.await.map_err(|_| ApiError::Worker)?;
            match failed {
                Some(err) => Err(err),
                None => written.map(|()| no_content()),
            }
        }
        _ => Err(no_route(parts)),
    }
}

/// The calls under `/v1/services/{name}`.
async fn service_route(
    agent: &Arc<Agent>,
    parts: &http::request::Parts,
    rest: &str,
) -> Result<Response<Body>, ApiError> {
    let (name, verb) = rest.split_once('/').unwrap_or((rest, ""));
    let service = agent.services.get(name)?;
    match (&parts.method, verb) {
        (&Method::GET, "logs") => {
            let query = parts.uri.query();
            let offset = offset_query(query)?.unwrap_or(0);
            Ok(respond(
                StatusCode::OK,
                "application/x-ndjson",
                Body::Stream(service::logs::read(service, offset, follow_query(query)?)),
            ))
        }
        (&Method::POST, "restart") => json(&agent.services.restart(&service).await?),
        _ => Err(no_route(parts)),
    }
}

/// `/v1/terminals/{id}` and the calls under it.
async fn terminal_route(
    agent: &Arc<Agent>,
    parts: &http::request::Parts,
    rest: &str,
    body: Incoming,
    upgrade: Option<OnUpgrade>,
) -> Result<Response<Body>, ApiError> {
    let (id, verb) = rest.split_once('/').unwrap_or((rest, ""));
    let terminal = agent.terminals.get(id)?;
    match (&parts.method, verb) {
        (&Method::GET, "") => json(&terminal.info()),
        (&Method::GET, "attach") => {
            let upgrade = upgrade_of(parts, upgrade, TERMINAL_UPGRADE)?;
            let attachment = terminal.attach(offset_query(parts.uri.query())?);
            let mut response = switching(TERMINAL_UPGRADE);
            response
                .headers_mut()
                .insert(OFFSET_HEADER, header::HeaderValue::from(attachment.start()));
            tokio::spawn(async move {
                match upgrade.await {
                    Ok(upgraded) => attachment.run(TokioIo::new(upgraded)).await,
                    Err(_) => attachment.detach(),
                }
            });
            Ok(response)
        }
        (&Method::POST, "resize") => {
            terminal.resize(&collect(body, &parts.headers, MAX_CONTROL_BODY).await?)?;
            Ok(no_content())
        }
        (&Method::POST, "signal") => {
            terminal.signal(&collect(body, &parts.headers, MAX_CONTROL_BODY).await?)?;
            Ok(no_content())
        }
        _ => Err(no_route(parts)),
    }
}

fn no_route(parts: &http::request::Parts) -> ApiError {
    ApiError::NoRoute {
        method: parts.method.clone(),
        path: parts.uri.path().to_owned(),
    }
}

/// The pending upgrade of a request that asked for `protocol`, or why it cannot be one.
fn upgrade_of(
    parts: &http::request::Parts,
    upgrade: Option<OnUpgrade>,
    protocol: &'static str,
) -> Result<OnUpgrade, ApiError> {
    let asked = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case(protocol));
    match upgrade {
        Some(upgrade) if asked => Ok(upgrade),
        _ => Err(ApiError::NeedsUpgrade { protocol }),
    }
}

/// `101 Switching Protocols` to `protocol`.
fn switching(protocol: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::Full(None));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(
        header::CONNECTION,
        header::HeaderValue::from_static("upgrade"),
    );
    headers.insert(header::UPGRADE, header::HeaderValue::from_static(protocol));
    response
}

fn authorize(token: &BootTokens, headers: &HeaderMap) -> Result<(), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .ok_or(ApiError::Unauthorized)?;
    if token.matches(presented) {
        Ok(())
    } else {
        Err(ApiError::Unauthorized)
    }
}

fn check_version(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(VERSION_HEADER) else {
        return Ok(());
    };
    let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
    match text.trim().parse().ok().and_then(negotiate) {
        Some(_) => Ok(()),
        None => Err(ApiError::Version { peer: text }),
    }
}

/// Streams a `PUT` body into [`files::write_atomic`] on a blocking thread.
async fn write(
    q: berth_protocol::guest::FileQuery,
    mode: WriteMode,
    body: Incoming,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    if content_length(headers).is_some_and(|n| n > MAX_FILE_BYTES) {
        return Err(ApiError::TooLarge {
            limit_bytes: MAX_FILE_BYTES,
        });
    }
    let (tx, rx) = mpsc::channel(4);
    let worker = tokio::task::spawn_blocking(move || {
        let _identity = FsIdentity::enter(q.user);
        match mode {
            WriteMode::Atomic => files::write_atomic(&q, rx),
            WriteMode::InPlace => files::write_in_place(&q, rx),
        }
    });
    let fed = feed(body, tx, MAX_FILE_BYTES).await;
    let written = worker.await.map_err(|_| ApiError::Worker)?;
    fed.and(written)
}

/// Streams a `PUT` body (a tar) into [`archive::start_write`]'s thread.
async fn write_archive(
    q: berth_protocol::guest::FileQuery,
    body: Incoming,
) -> Result<berth_protocol::files::ArchiveWritten, ApiError> {
    let (tx, rx) = mpsc::channel(4);
    let worker = archive::start_write(q, rx)?;
    let fed = feed(body, tx, u64::MAX).await;
    let written = worker.await.map_err(|_| ApiError::Worker)?;
    // The worker's refusal names the entry; it is the answer even when the body was cut
    // short because of it.
    let written = written?;
    fed.map(|()| written)
}

/// Sends a request body's chunks to a blocking worker, then [`Chunk::End`] when the whole
/// body came and stayed within `limit`. The channel holds a few chunks: the body is read
/// only as fast as the worker takes it.
async fn feed(mut body: Incoming, tx: mpsc::Sender<Chunk>, limit: u64) -> Result<(), ApiError> {
    let mut total = 0u64;
    let mut failed = None;
    // Once the worker has given up (a full volume, a denied path), the rest of the body is
    // still read and dropped: a client still sending when the answer and the close come
    // would see a broken pipe instead of the error.
    let mut discarding = false;
    while let Some(frame) = body.frame().await {
        match frame.map(Frame::into_data) {
            Err(err) => failed = Some(ApiError::Body(err)),
            Ok(Err(_trailers)) => continue,
            Ok(Ok(data)) => {
                total += data.len() as u64;
                if total > limit {
                    failed = Some(ApiError::TooLarge { limit_bytes: limit });
                } else {
                    if !discarding && tx.send(Chunk::Data(data)).await.is_err() {
                        discarding = true;
                    }
                    continue;
                }
            }
        }
        break;
    }
    match failed {
        Some(err) => Err(err),
        None => {
            let _ = tx.send(Chunk::End).await;
            Ok(())
        }
    }
}

async fn collect(mut body: Incoming, headers: &HeaderMap, limit: u64) -> Result<Bytes, ApiError> {
    if content_length(headers).is_some_and(|n| n > limit) {
        return Err(ApiError::TooLarge { limit_bytes: limit });
    }
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.map_err(ApiError::Body)?.into_data() {
            if (buf.len() + data.len()) as u64 > limit {
                return Err(ApiError::TooLarge { limit_bytes: limit });
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(Bytes::from(buf))
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

fn json<T: serde::Serialize>(value: &T) -> Result<Response<Body>, ApiError> {
    let body = serde_json::to_vec(value).map_err(ApiError::BadJson)?;
    Ok(respond(
        StatusCode::OK,
        "application/json",
        Body::full(body),
    ))
}

fn no_content() -> Response<Body> {
    let mut response = Response::new(Body::Full(None));
    *response.status_mut() = StatusCode::NO_CONTENT;
    response
}

fn respond(status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    response
}

/// A response body: a whole buffer, chunks as they come (exec frames, events), or chunks
/// of a length announced up front (a file read: hyper sends it as `Content-Length` and
/// fails the connection if fewer bytes come). Dropping a streamed body (the client went
/// away) closes its channel, which is how the producer learns of a disconnect. A
/// fallible stream (a tar) ends with an error when its producer fails, which cuts the
/// connection: the peer never takes a partial stream for a whole one.
pub enum Body {
    Full(Option<Bytes>),
    Stream(mpsc::Receiver<Bytes>),
    Fallible(archive::TarStream),
    Sized {
        chunks: mpsc::Receiver<Bytes>,
        len: u64,
    },
}

impl Body {
    fn full(bytes: Vec<u8>) -> Self {
        Body::Full(Some(Bytes::from(bytes)))
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            Body::Fallible(chunks) => futures_util::Stream::poll_next(chunks.as_mut(), cx)
                .map(|chunk| chunk.map(|b| b.map(Frame::data))),
            Body::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Body::Stream(rx) | Body::Sized { chunks: rx, .. } => rx
                .poll_recv(cx)
                .map(|chunk| chunk.map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Body::Full(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
            Body::Stream(_) | Body::Fallible(_) => SizeHint::default(),
            Body::Sized { len, .. } => SizeHint::with_exact(*len),
        }
    }
}
