//! The host side of the guest channel: typed calls to a box's `berth-init`.
//!
//! One connection per call (a Unix-socket connect costs microseconds); the exec stream
//! holds its connection until the process exits, and dropping the stream closes it, which
//! makes `berth-init` kill the process group.

use std::path::PathBuf;

use berth_protocol::guest::{ExecFrame, ExecRequest, FileEntry, FileList, FileQuery, Info};
use berth_protocol::harness::{DeliverRequest, DeliverResponse, GuestEvent, HarnessStatus};
use berth_protocol::version::VERSION_HEADER;
use berth_protocol::{negotiate, ErrorBody, ErrorCode, ProtocolVersion, PROTOCOL_VERSION};
use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use crate::spec::BootToken;

/// Where the agent listens, seen from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuestAddr {
    /// A Unix socket (the sandbox backend's bind-mounted `agent.sock`).
    Unix(PathBuf),
    /// Firecracker-style hybrid vsock: connect to `path`, send `CONNECT <port>\n`, read
    /// `OK <n>\n`, then the stream is the guest's.
    HybridVsock { path: PathBuf, port: u32 },
}

#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("cannot connect to the guest agent at {addr:?}")]
    Connect {
        addr: GuestAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("hybrid vsock handshake with {path:?} failed: {reply}")]
    Handshake { path: PathBuf, reply: String },
    #[error("guest channel HTTP error")]
    Http(#[from] hyper::Error),
    /// The agent answered with an error body.
    #[error("guest agent answered {status}: {} ({})", body.error.message, body.error.code)]
    Remote { status: u16, body: ErrorBody },
    #[error("cannot decode the guest agent's answer")]
    Decode(#[from] serde_json::Error),
    #[error(
        "guest agent speaks protocol {agent}, this host needs at least {}",
        berth_protocol::version::MIN_PROTOCOL_VERSION
    )]
    Version { agent: ProtocolVersion },
}

impl GuestError {
    /// The error code to show a client: the agent's own for remote errors.
    pub fn code(&self) -> ErrorCode {
        match self {
            GuestError::Remote { body, .. } => body.error.code,
            GuestError::Connect { .. } | GuestError::Handshake { .. } | GuestError::Http(_) => {
                ErrorCode::Unavailable
            }
            GuestError::Decode(_) | GuestError::Version { .. } => ErrorCode::Internal,
        }
    }
}

/// A client for one boot of one box's agent.
#[derive(Debug, Clone)]
pub struct GuestClient {
    addr: GuestAddr,
    token: BootToken,
}

impl GuestClient {
    pub fn new(addr: GuestAddr, token: BootToken) -> Self {
        GuestClient { addr, token }
    }

    pub fn addr(&self) -> &GuestAddr {
        &self.addr
    }

    /// `GET /v1/info`, checking the agent's protocol version.
    pub async fn info(&self) -> Result<Info, GuestError> {
        let info: Info = self
            .call_json(Method::GET, "/v1/info", Bytes::new())
            .await?;
        negotiate(info.protocol_version).ok_or(GuestError::Version {
            agent: info.protocol_version,
        })?;
        Ok(info)
    }

    /// Starts a process; frames arrive through the returned stream.
    pub async fn exec(&self, req: &ExecRequest) -> Result<ExecStream, GuestError> {
        let body = Bytes::from(serde_json::to_vec(req)?);
        let response = self.send(Method::POST, "/v1/exec", body).await?;
        Ok(NdjsonStream::new(response.into_body()))
    }

    /// Hands one message to the harness; answers once the harness has it (or had it).
    pub async fn deliver(&self, req: &DeliverRequest) -> Result<DeliverResponse, GuestError> {
        let body = Bytes::from(serde_json::to_vec(req)?);
        self.call_json(Method::POST, "/v1/messages", body).await
    }

    /// Every journalled event with `seq > after`, then new ones as they come, until the
    /// stream is dropped. Asking tells the agent the host has stored everything up to
    /// `after`.
    pub async fn events(&self, after: u64) -> Result<EventStream, GuestError> {
        let uri = format!("/v1/events?after={after}");
        let response = self.send(Method::GET, &uri, Bytes::new()).await?;
        Ok(NdjsonStream::new(response.into_body()))
    }

    pub async fn harness_status(&self) -> Result<HarnessStatus, GuestError> {
        self.call_json(Method::GET, "/v1/harness", Bytes::new())
            .await
    }

    pub async fn read_file(&self, q: &FileQuery) -> Result<Bytes, GuestError> {
        let response = self
            .send(Method::GET, &file_uri("/v1/files", q), Bytes::new())
            .await?;
        Ok(response.into_body().collect().await?.to_bytes())
    }

    pub async fn write_file(&self, q: &FileQuery, data: Bytes) -> Result<(), GuestError> {
        self.send(Method::PUT, &file_uri("/v1/files", q), data)
            .await
            .map(drop)
    }

    pub async fn list_files(&self, q: &FileQuery) -> Result<FileList, GuestError> {
        self.call_json(Method::GET, &file_uri("/v1/files/list", q), Bytes::new())
            .await
    }

    pub async fn stat(&self, q: &FileQuery) -> Result<FileEntry, GuestError> {
        self.call_json(Method::GET, &file_uri("/v1/files/stat", q), Bytes::new())
            .await
    }

    pub async fn mkdir(&self, q: &FileQuery) -> Result<(), GuestError> {
        self.send(Method::POST, &file_uri("/v1/files/mkdir", q), Bytes::new())
            .await
            .map(drop)
    }

    pub async fn remove(&self, q: &FileQuery) -> Result<(), GuestError> {
        self.send(Method::DELETE, &file_uri("/v1/files", q), Bytes::new())
            .await
            .map(drop)
    }

    /// Asks the agent to stop every process, sync and exit.
    pub async fn shutdown(&self) -> Result<(), GuestError> {
        self.send(Method::POST, "/v1/shutdown", Bytes::new())
            .await
            .map(drop)
    }

    async fn call_json<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        uri: &str,
        body: Bytes,
    ) -> Result<T, GuestError> {
        let response = self.send(method, uri, body).await?;
        let bytes = response.into_body().collect().await?.to_bytes();
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Sends one request on a fresh connection; a non-2xx answer becomes `Remote`.
    async fn send(
        &self,
        method: Method,
        uri: &str,
        body: Bytes,
    ) -> Result<http::Response<Incoming>, GuestError> {
        let stream = self.connect().await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // The connection ends when the response body is dropped or read to the end.
            let _ = conn.await;
        });
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::HOST, "berth-init")
            .header(
                http::header::AUTHORIZATION,
                format!("Bearer {}", self.token.as_str()),
            )
            .header(VERSION_HEADER, PROTOCOL_VERSION.to_string())
            .body(Full::new(body))
            .expect("a request built from a valid method and path");
        let response = sender.send_request(request).await?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = response.into_body().collect().await?.to_bytes();
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

/// A newline-delimited JSON response body, read one value at a time.
pub struct NdjsonStream<T> {
    body: Incoming,
    buf: BytesMut,
    done: bool,
    _item: std::marker::PhantomData<fn() -> T>,
}

impl<T: serde::de::DeserializeOwned> NdjsonStream<T> {
    fn new(body: Incoming) -> Self {
        NdjsonStream {
            body,
            buf: BytesMut::new(),
            done: false,
            _item: std::marker::PhantomData,
        }
    }

    /// The next value, or `None` after the last one.
    pub async fn next_frame(&mut self) -> Result<Option<T>, GuestError> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                let line = self.buf.split_to(pos + 1);
                if line.len() > 1 {
                    return Ok(Some(serde_json::from_slice(&line[..pos])?));
                }
                continue;
            }
            if self.done {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let rest = self.buf.split();
                return Ok(Some(serde_json::from_slice(&rest)?));
            }
            match self.body.frame().await {
                Some(frame) => {
                    if let Ok(mut data) = frame?.into_data() {
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            self.buf.extend_from_slice(chunk);
                            let n = chunk.len();
                            data.advance(n);
                        }
                    }
                }
                None => self.done = true,
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unix_connect_refuses_a_planted_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.sock");
        let _listener = tokio::net::UnixListener::bind(&real).unwrap();
        connect_unix_nofollow(&real)
            .await
            .expect("a socket connects");
        let link = dir.path().join("agent.sock");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        assert!(connect_unix_nofollow(&link).await.is_err());
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(connect_unix_nofollow(&file).await.is_err());
    }

    #[test]
    fn paths_are_percent_encoded() {
        let q = FileQuery {
            path: "/home/user/a b&c\0".into(),
            ..Default::default()
        };
        assert_eq!(
            file_uri("/v1/files", &q),
            "/v1/files?path=/home/user/a%20b%26c%00&user=user"
        );
    }
}
