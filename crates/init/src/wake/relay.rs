//! PID 1's side of `berth-wake`: the command's link and socket in
//! [`WAKE_BIN_DIR`], one request per connection (a JSON line: a [`WakeOp`]), journalled as
//! a `wake_request` event for the host, answered with the host's [`WakeReply`] (or a
//! timeout) as one JSON line.
//!
//! Only the box's user and root may ask: the socket is open to all, and the peer's uid is
//! checked on each connection (the box may have other users).

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use berth_protocol::guest::BOX_USER_UID;
use berth_protocol::wake::{
    WakeOp, WakeReply, WakeRequest, MAX_WAKE_REQUEST_BYTES, WAKE_BIN_DIR, WAKE_COMMAND,
    WAKE_REQUEST_EVENT, WAKE_SOCKET,
};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::harness::{supervisor, Harness};

/// How long a request waits for the host's answer.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(15);
/// Requests waiting for the host at once; more are refused at once.
const MAX_WAITING: usize = 8;

type Waiting = Mutex<HashMap<String, oneshot::Sender<WakeReply>>>;

/// The requests waiting for the host, by request id.
fn waiting() -> &'static Waiting {
    static WAITING: OnceLock<Waiting> = OnceLock::new();
    WAITING.get_or_init(Default::default)
}

/// Installs `berth-wake` and serves it, when this is a box's PID 1 (a test running the
/// agent as a plain process leaves the host's `/run` alone).
pub fn start(harness: Arc<Harness>) {
    if std::process::id() != 1 {
        return;
    }
    match install(Path::new(WAKE_BIN_DIR)) {
        Ok(listener) => {
            tokio::spawn(serve(listener, harness));
        }
        Err(err) => eprintln!("berth-init: berth-wake is unavailable: {err}"),
    }
}

fn install(dir: &Path) -> std::io::Result<UnixListener> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    place_command(&dir.join(WAKE_COMMAND))?;
    let _ = std::fs::remove_file(WAKE_SOCKET);
    let listener = UnixListener::bind(WAKE_SOCKET)?;
    // Anyone may connect; who may ask is checked by uid per connection.
    std::fs::set_permissions(WAKE_SOCKET, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// `berth-wake` at `path`: a link to this binary where the box sees it (a sandbox binds it
/// at `/.berth/berth-init`), else a copy of it (a VM's init came from the initramfs, whose
/// files are gone after the switch to the box's root).
fn place_command(path: &Path) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let exe = std::env::current_exe()?;
    if exe.is_file() {
        return std::os::unix::fs::symlink(exe, path);
    }
    std::fs::copy("/proc/self/exe", path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
}

async fn serve(listener: UnixListener, harness: Arc<Harness>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let harness = harness.clone();
        tokio::spawn(async move {
            let _ = one(stream, &harness).await;
        });
    }
}

/// One `berth-wake` call.
async fn one(stream: UnixStream, harness: &Harness) -> std::io::Result<()> {
    let allowed = stream
        .peer_cred()
        .is_ok_and(|c| c.uid() == 0 || c.uid() == BOX_USER_UID);
    let (read, mut write) = stream.into_split();
    // The request is read (bounded) even from a caller that is refused: answering before
    // it has written would break its pipe and hide the refusal from it.
    let mut line = Vec::new();
    let mut read = BufReader::new(read).take(MAX_WAKE_REQUEST_BYTES as u64 + 1);
    read.read_until(b'\n', &mut line).await?;
    let answer = if !allowed {
        local(403, "only the box's user may set wakeups")
    } else if line.len() > MAX_WAKE_REQUEST_BYTES {
        local(413, "the request is larger than 64 KiB")
    } else {
        match serde_json::from_slice::<WakeOp>(&line) {
            Ok(op) => ask_host(harness, op).await,
            Err(err) => local(400, &format!("malformed request: {err}")),
        }
    };
    let mut out = serde_json::to_vec(&answer).unwrap_or_default();
    out.push(b'\n');
    write.write_all(&out).await?;
    write.shutdown().await
}

/// Journals the request for the host and waits for its answer.
async fn ask_host(harness: &Harness, op: WakeOp) -> WakeReply {
    if harness.journals.is_none() {
        return local(
            400,
            "this box runs no harness: a wakeup delivers a message to the box's harness",
        );
    }
    let request_id = crate::boot::random_hex::<8>();
    let (tx, rx) = oneshot::channel();
    {
        let mut waiting = crate::harness::lock(waiting());
        if waiting.len() >= MAX_WAITING {
            return local(429, "too many berth-wake calls waiting for the host; retry");
        }
        waiting.insert(request_id.clone(), tx);
    }
    let request = WakeRequest {
        request_id: request_id.clone(),
        op,
    };
    let data = serde_json::to_value(&request).unwrap_or_default();
    if supervisor::emit(harness, vec![(WAKE_REQUEST_EVENT.to_owned(), data)]).is_none() {
        crate::harness::lock(waiting()).remove(&request_id);
        return local(503, "cannot journal the request for the host");
    }
    let answer = tokio::time::timeout(REPLY_TIMEOUT, rx).await;
    crate::harness::lock(waiting()).remove(&request_id);
    match answer {
        Ok(Ok(reply)) => reply,
        _ => local(
            504,
            "berth did not answer within 15 s (the daemon may be restarting); check with `berth-wake ls` before retrying",
        ),
    }
}

/// An answer made in the box, in the API's error shape.
fn local(status: u16, message: &str) -> WakeReply {
    let code = match status {
        400 => "invalid_request",
        403 => "permission_denied",
        413 => "payload_too_large",
        429 => "too_many_requests",
        504 => "timeout",
        _ => "unavailable",
    };
    WakeReply {
        request_id: String::new(),
        status,
        body: json!({"error": {"code": code, "message": message}}),
    }
}

/// `POST /v1/wake/reply`: the host's answer, handed to the waiting `berth-wake` (an answer
/// nobody waits for any more is dropped).
pub fn reply(body: &[u8]) -> Result<(), ApiError> {
    let reply: WakeReply = serde_json::from_slice(body).map_err(ApiError::BadJson)?;
    if let Some(tx) = crate::harness::lock(waiting()).remove(&reply.request_id) {
        let _ = tx.send(reply);
    }
    Ok(())
}
