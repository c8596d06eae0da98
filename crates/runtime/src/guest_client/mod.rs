//! The host side of the guest channel: typed calls to a box's `berth-init`.
//!
//! One connection per call (a Unix-socket connect costs microseconds); the exec stream
//! holds its connection until the process exits, and dropping the stream closes it, which
//! makes `berth-init` kill the process group.
//!
//! Everything read from the agent is bounded ([`body`], [`ndjson`]): in a VM the agent's
//! side of the channel is the guest root's. The client keeps the protocol version it agreed
//! with the agent (asked once, at the first call that needs it) and refuses a call the
//! agent's version lacks ([`GuestError::Unsupported`]).

mod archive;
mod body;
mod error;
mod handoff;
mod ndjson;
mod process;
mod service;
#[cfg(test)]
mod tests;
mod upgrade;
mod wake;

use std::path::PathBuf;
use std::sync::Arc;

use berth_protocol::guest::{
    BootTokenRequest, Call, ExecFrame, ExecRequest, FileEntry, FileList, FileMove, FileQuery, Info,
    WriteMode, MAX_ERROR_BODY_BYTES, MAX_JSON_ANSWER_BYTES,
};
use berth_protocol::harness::{DeliverRequest, DeliverResponse, GuestEvent, HarnessStatus};
use berth_protocol::version::VERSION_HEADER;
use berth_protocol::{negotiate, ErrorBody, ErrorCode, ProtocolVersion, PROTOCOL_VERSION};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::sync::OnceCell;

use crate::spec::BootToken;
use body::{collect_limited, full, RequestBody};

pub use archive::{ArchiveUpload, WatchStream};
pub use berth_handoff::Sender as HandoffSender;
pub use body::{FileDownload, Upload};
pub use error::{BodyError, GuestError};
pub use handoff::{HandoffRefused, PortHandoff};
pub use ndjson::NdjsonStream;
pub use process::ProcessOutput;
pub use upgrade::{GuestStream, TerminalStream};

/// Where the agent listens, seen from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuestAddr {
    /// A Unix socket (the sandbox backend's bind-mounted `agent.sock`).
    Unix(PathBuf),
    /// Firecracker-style hybrid vsock: connect to `path`, send `CONNECT <port>\n`, read
    /// `OK <n>\n`, then the stream is the guest's.
    HybridVsock { path: PathBuf, port: u32 },
}

/// A client for one boot of one box's agent. Clones share the agreed protocol version.
#[derive(Debug, Clone)]
pub struct GuestClient {
    addr: GuestAddr,
    token: BootToken,
    agreed: Arc<OnceCell<ProtocolVersion>>,
}

impl GuestClient {
    pub fn new(addr: GuestAddr, token: BootToken) -> Self {
        GuestClient {
            addr,
            token,
            agreed: Arc::new(OnceCell::new()),
        }
    }

    pub fn addr(&self) -> &GuestAddr {
        &self.addr
    }

    /// `GET /v1/info`, checking the agent's protocol version and keeping the agreed one.
    pub async fn info(&self) -> Result<Info, GuestError> {
        let (info, agreed) = self.fetch_info().await?;
        // A first answer already set it: one boot's agent has one version.
        let _ = self.agreed.set(agreed);
        Ok(info)
    }

    /// The protocol version agreed with this boot's agent, asking it once if no call has.
    pub async fn agreed_version(&self) -> Result<ProtocolVersion, GuestError> {
        self.agreed
            .get_or_try_init(|| async { Ok(self.fetch_info().await?.1) })
            .await
            .copied()
    }

    async fn fetch_info(&self) -> Result<(Info, ProtocolVersion), GuestError> {
        let response = self
            .request(Method::GET, "/v1/info", full(Bytes::new()))
            .await?;
        let info: Info = decode(response).await?;
        let agreed = negotiate(info.protocol_version).ok_or(GuestError::Version {
            agent: info.protocol_version,
        })?;
        Ok((info, agreed))
    }

    /// Refuses `call` when the agreed version predates it.
    async fn require(&self, call: Call) -> Result<(), GuestError> {
        let agent = self.agreed_version().await?;
        let needs = call.introduced_in();
        if needs > agent {
            return Err(GuestError::Unsupported { call, needs, agent });
        }
        Ok(())
    }

    /// Starts a process; frames arrive through the returned stream.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecStream, GuestError> {
        let body = Bytes::from(serde_json::to_vec(req)?);
        let response = self
            .send(Call::Exec, Method::POST, "/v1/exec", body)
            .await?;
        Ok(NdjsonStream::new(response.into_body()))
    }

    /// Hands one message to the harness; answers once the harness has it (or had it).
    pub async fn deliver(&self, req: &DeliverRequest) -> Result<DeliverResponse, GuestError> {
        let body = Bytes::from(serde_json::to_vec(req)?);
        self.call_json(Call::Deliver, Method::POST, "/v1/messages", body)
            .await
    }

    /// Every journalled event with `seq > after`, then new ones as they come, until the
    /// stream is dropped. Asking tells the agent the host has stored everything up to
    /// `after`.
    pub async fn events(&self, after: u64) -> Result<EventStream, GuestError> {
        let uri = format!("/v1/events?after={after}");
        let response = self
            .send(Call::Events, Method::GET, &uri, Bytes::new())
            .await?;
        Ok(NdjsonStream::new(response.into_body()))
    }

    pub async fn harness_status(&self) -> Result<HarnessStatus, GuestError> {
        self.call_json(
            Call::HarnessStatus,
            Method::GET,
            "/v1/harness",
            Bytes::new(),
        )
        .await
    }

    /// Opens a file for reading; its bytes stream from the returned download.
    pub async fn download_file(&self, q: &FileQuery) -> Result<FileDownload, GuestError> {
        let uri = file_uri("/v1/files", q);
        let response = self
            .send(Call::FileRead, Method::GET, &uri, Bytes::new())
            .await?;
        FileDownload::new(response)
    }

    /// A whole file in memory (at most [`berth_protocol::guest::MAX_FILE_BYTES`]): for
    /// small files and tests; the daemon streams with [`GuestClient::download_file`].
    pub async fn read_file(&self, q: &FileQuery) -> Result<Bytes, GuestError> {
        let mut download = self.download_file(q).await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = download.next_chunk().await? {
            bytes.extend_from_slice(&chunk);
        }
        Ok(Bytes::from(bytes))
    }

    /// Connects for a file write; [`Upload::send`] then streams the bytes. Split in
    /// two so a caller can retry the connect without having spent the body.
    pub async fn open_upload(&self, q: &FileQuery, mode: WriteMode) -> Result<Upload, GuestError> {
        self.require(Call::FileWrite).await?;
        let mut uri = file_uri("/v1/files", q);
        if mode == WriteMode::InPlace {
            uri.push_str("&in_place=true");
        }
        Ok(Upload {
            sender: self.connection().await?,
            request: self.builder(Method::PUT, &uri),
            limit: Some(berth_protocol::guest::MAX_FILE_BYTES),
        })
    }

    /// Writes a whole file held in memory: for small files and tests; the daemon streams
    /// with [`GuestClient::open_upload`].
    pub async fn write_file(&self, q: &FileQuery, data: Bytes) -> Result<(), GuestError> {
        let body = http_body_util::Full::new(data);
        self.open_upload(q, WriteMode::Atomic)
            .await?
            .send(body)
            .await
    }

    pub async fn list_files(&self, q: &FileQuery) -> Result<FileList, GuestError> {
        let uri = file_uri("/v1/files/list", q);
        self.call_json(Call::FileList, Method::GET, &uri, Bytes::new())
            .await
    }

    pub async fn stat(&self, q: &FileQuery) -> Result<FileEntry, GuestError> {
        let uri = file_uri("/v1/files/stat", q);
        self.call_json(Call::FileStat, Method::GET, &uri, Bytes::new())
            .await
    }

    pub async fn mkdir(&self, q: &FileQuery) -> Result<(), GuestError> {
        let uri = file_uri("/v1/files/mkdir", q);
        self.send(Call::FileMkdir, Method::POST, &uri, Bytes::new())
            .await
            .map(drop)
    }

    /// Renames within the box (protocol version 5); answers the entry now at `to`.
    pub async fn move_file(&self, req: &FileMove) -> Result<FileEntry, GuestError> {
        let body = Bytes::from(serde_json::to_vec(req)?);
        self.call_json(Call::FileMove, Method::POST, "/v1/files/move", body)
            .await
    }

    pub async fn remove(&self, q: &FileQuery) -> Result<(), GuestError> {
        let uri = file_uri("/v1/files", q);
        self.send(Call::FileRemove, Method::DELETE, &uri, Bytes::new())
            .await
            .map(drop)
    }

    /// Hands the agent this boot's new token (it refuses the old one from the answer on)
    /// and, in a VM, sets the guest clock to the host's. Callers then talk through a new
    /// client holding `new`.
    pub async fn rotate_token(&self, new: &BootToken) -> Result<(), GuestError> {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let req = BootTokenRequest {
            token: new.as_str().to_owned(),
            unix_ms,
        };
        let body = Bytes::from(serde_json::to_vec(&req)?);
        self.send(Call::BootToken, Method::POST, "/v1/boot/token", body)
            .await
            .map(drop)
    }

    /// Asks the agent to stop every process, sync and exit.
    pub async fn shutdown(&self) -> Result<(), GuestError> {
        self.send(Call::Shutdown, Method::POST, "/v1/shutdown", Bytes::new())
            .await
            .map(drop)
    }

    async fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        call: Call,
        method: Method,
        uri: &str,
        body: Bytes,
    ) -> Result<T, GuestError> {
        decode(self.send(call, method, uri, body).await?).await
    }

    /// Sends one call on a fresh connection, once the agreed version has it; a non-2xx
    /// answer becomes `Remote`.
    async fn send(
        &self,
        call: Call,
        method: Method,
        uri: &str,
        body: Bytes,
    ) -> Result<http::Response<Incoming>, GuestError> {
        self.require(call).await?;
        self.request(method, uri, full(body)).await
    }

    async fn request(
        &self,
        method: Method,
        uri: &str,
        body: RequestBody,
    ) -> Result<http::Response<Incoming>, GuestError> {
        let mut sender = self.connection().await?;
        let request = self
            .builder(method, uri)
            .body(body)
            .expect("a request built from a valid method and path");
        check_status(sender.send_request(request).await?).await
    }

    /// A fresh HTTP/1.1 connection to the agent.
    async fn connection(&self) -> Result<SendRequest<RequestBody>, GuestError> {
        let stream = self.connect().await?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // The connection ends when the response body is dropped or read to the end.
            let _ = conn.await;
        });
        Ok(sender)
    }

    fn builder(&self, method: Method, uri: &str) -> http::request::Builder {
        Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::HOST, "berth-init")
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.token.as_str()),
            )
            .header(VERSION_HEADER, PROTOCOL_VERSION.to_string())
    }

    async fn connect(&self) -> Result<UnixStream, GuestError> {
        let connect_err = |source| GuestError::Connect {
            addr: self.addr.clone(),
            source,
        };
        match &self.addr {
            GuestAddr::Unix(path) => connect_unix_nofollow(path).await.map_err(connect_err),
            GuestAddr::HybridVsock { path, port } => {
                use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
                let mut stream = UnixStream::connect(path).await.map_err(connect_err)?;
                stream
                    .write_all(format!("CONNECT {port}\n").as_bytes())
                    .await
                    .map_err(connect_err)?;
                // Read the reply a byte at a time: nothing past its newline may be consumed.
                let mut reply = Vec::new();
                let mut reader = tokio::io::BufReader::with_capacity(1, &mut stream);
                reader
                    .read_until(b'\n', &mut reply)
                    .await
                    .map_err(connect_err)?;
                let reply = String::from_utf8_lossy(&reply).trim().to_owned();
                if !reply.starts_with("OK ") {
                    return Err(GuestError::Handshake {
                        path: path.clone(),
                        reply,
                    });
                }
                Ok(stream)
            }
        }
    }
}

/// Connects to the socket at `path` without following a symlink in its last component.
/// The socket lives in a directory the box's root can write to: a link planted there must
/// not send the host (and the boot token) to some other socket of the host.
async fn connect_unix_nofollow(path: &std::path::Path) -> std::io::Result<UnixStream> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    if !handle.metadata()?.file_type().is_socket() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the agent address is not a socket",
        ));
    }
    // The /proc magic link names exactly the inode just opened; `handle` lives until the
    // connect is done.
    let stream = UnixStream::connect(format!("/proc/self/fd/{}", handle.as_raw_fd())).await;
    drop(handle);
    stream
}

/// The frames of one running exec. Dropping it disconnects, which kills the process group.
pub type ExecStream = NdjsonStream<ExecFrame>;

/// The harness events of a box, as they come. Dropping it disconnects.
pub type EventStream = NdjsonStream<GuestEvent>;

/// A 2xx answer as it is; any other becomes `Remote` with the agent's (bounded) error body.
async fn check_status(
    response: http::Response<Incoming>,
) -> Result<http::Response<Incoming>, GuestError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let bytes = collect_limited(response, MAX_ERROR_BODY_BYTES, "error body").await?;
    let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        ErrorBody::new(
            status_code(status),
            String::from_utf8_lossy(&bytes).into_owned(),
        )
    });
    Err(GuestError::Remote {
        status: status.as_u16(),
        body,
    })
}

/// A JSON answer of at most [`MAX_JSON_ANSWER_BYTES`].
async fn decode<T: serde::de::DeserializeOwned>(
    response: http::Response<Incoming>,
) -> Result<T, GuestError> {
    let bytes = collect_limited(response, MAX_JSON_ANSWER_BYTES, "JSON answer").await?;
    Ok(serde_json::from_slice(&bytes)?)
}

fn file_uri(path: &str, q: &FileQuery) -> String {
    let mut uri = format!(
        "{path}?path={}&user={}",
        percent_encode(&q.path),
        q.user.as_str()
    );
    if q.recursive {
        uri.push_str("&recursive=true");
    }
    if let Some(mode) = q.mode {
        uri.push_str(&format!("&mode={mode}"));
    }
    uri
}

/// Percent-encodes everything but unreserved characters and `/`.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn status_code(status: StatusCode) -> ErrorCode {
    match status {
        StatusCode::UNAUTHORIZED => ErrorCode::Unauthorized,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::FORBIDDEN => ErrorCode::PermissionDenied,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::BAD_REQUEST => ErrorCode::InvalidRequest,
        _ => ErrorCode::Internal,
    }
}
