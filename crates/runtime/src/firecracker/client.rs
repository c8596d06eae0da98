//! HTTP/1.1 to Firecracker's API socket (`--api-sock`), one connection per call, like the
//! guest channel (`guest_client.rs`). A 4xx/5xx answer carries `{"fault_message": …}`
//! and becomes [`ApiError::Fault`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;

use super::api::{ApiRequest, Fault, InstanceInfo};

/// How long one API call may take. Firecracker answers configuration calls in
/// microseconds; `InstanceStart` loads the kernel and initramfs first.
pub const API_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("cannot connect to the Firecracker API at {}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("Firecracker API {method} {path}: HTTP error")]
    Http {
        method: http::Method,
        path: String,
        #[source]
        source: hyper::Error,
    },
    /// Firecracker refused the call and said why.
    #[error("Firecracker refused {method} {path} ({status}): {fault_message}")]
    Fault {
        method: http::Method,
        path: String,
        status: u16,
        fault_message: String,
    },
    #[error("cannot decode Firecracker's answer to {method} {path} ({status})")]
    Decode {
        method: http::Method,
        path: String,
        status: u16,
        #[source]
        source: serde_json::Error,
    },
    #[error("Firecracker API {method} {path}: no answer within {} ms", API_TIMEOUT.as_millis())]
    Timeout { method: http::Method, path: String },
}

/// A client for one Firecracker process's API socket.
#[derive(Debug, Clone)]
pub struct ApiClient {
    socket: PathBuf,
}

impl ApiClient {
    pub fn new(socket: &Path) -> ApiClient {
        ApiClient {
            socket: socket.to_path_buf(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Sends `request`; the answer's body on a 2xx (empty for Firecracker's 204s).
    pub async fn call(&self, request: &ApiRequest) -> Result<Bytes, ApiError> {
        match tokio::time::timeout(API_TIMEOUT, self.call_once(request)).await {
            Ok(result) => result,
            Err(_) => Err(ApiError::Timeout {
                method: request.method.clone(),
                path: request.path.clone(),
            }),
        }
    }

    /// `GET /`.
    pub async fn instance_info(&self) -> Result<InstanceInfo, ApiError> {
        let request = ApiRequest::instance_info();
        let bytes = self.call(&request).await?;
        serde_json::from_slice(&bytes).map_err(|source| ApiError::Decode {
            method: request.method,
            path: request.path,
            status: 200,
            source,
        })
    }

    /// Waits until the API socket accepts a connection: `Err(true)` when `pid` (the VMM)
    /// died first, `Err(false)` after `timeout`. The socket's path alone is not enough:
    /// Firecracker binds it before it listens, and a connect between the two is refused.
    pub async fn wait_listening(&self, pid: i32, timeout: Duration) -> Result<(), bool> {
        use std::io::ErrorKind;
        let started = std::time::Instant::now();
        let mut backoff = Duration::from_millis(1);
        loop {
            match UnixStream::connect(&self.socket).await {
                Ok(_) => return Ok(()),
                // Not bound yet, or bound and not listening yet.
                Err(e)
                    if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::ConnectionRefused) => {}
                // Anything else: the first call reports it with its context.
                Err(_) => return Ok(()),
            }
            if !crate::process::pid_alive(pid) {
                return Err(true);
            }
            if started.elapsed() >= timeout {
                return Err(false);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_millis(50));
        }
    }

    async fn call_once(&self, request: &ApiRequest) -> Result<Bytes, ApiError> {
        let http_error = |source| ApiError::Http {
            method: request.method.clone(),
            path: request.path.clone(),
            source,
        };
        let stream =
            UnixStream::connect(&self.socket)
                .await
                .map_err(|source| ApiError::Connect {
                    socket: self.socket.clone(),
                    source,
                })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http_error)?;
        tokio::spawn(async move {
            // The connection ends once the answer has been read.
            let _ = conn.await;
        });
        let body = match &request.body {
            Some(json) => Bytes::from(json.to_string()),
            None => Bytes::new(),
        };
        let mut builder = Request::builder()
            .method(request.method.clone())
            .uri(request.path.as_str())
            .header(http::header::HOST, "localhost")
            .header(http::header::ACCEPT, "application/json");
        if request.body.is_some() {
            builder = builder.header(http::header::CONTENT_TYPE, "application/json");
        }
        let http_request = builder
            .body(Full::new(body))
            .expect("a request built from a valid method and an absolute path");
        let response = sender
            .send_request(http_request)
            .await
            .map_err(http_error)?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(http_error)?
            .to_bytes();
        if status.is_success() {
            return Ok(bytes);
        }
        match serde_json::from_slice::<Fault>(&bytes) {
            Ok(fault) => Err(ApiError::Fault {
                method: request.method.clone(),
                path: request.path.clone(),
                status: status.as_u16(),
                fault_message: fault.fault_message,
            }),
            Err(source) => Err(ApiError::Decode {
                method: request.method.clone(),
                path: request.path.clone(),
                status: status.as_u16(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::api::{ActionType, InstanceState, VmStateRequest};
    use super::super::fake::FakeApi;
    use super::*;

    #[tokio::test]
    async fn faults_and_garbage_become_typed_errors() {
        let fake = FakeApi::start().await;
        fake.fail(
            "/actions",
            400,
            r#"{"fault_message": "Invalid kernel image"}"#,
        );
        fake.fail("/vm", 500, "not json");
        let client = ApiClient::new(fake.socket());
        match client
            .call(&ApiRequest::action(ActionType::InstanceStart))
            .await
        {
            Err(ApiError::Fault {
                status: 400,
                fault_message,
                path,
                ..
            }) => {
                assert_eq!(fault_message, "Invalid kernel image");
                assert_eq!(path, "/actions");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            client
                .call(&ApiRequest::vm_state(VmStateRequest::Paused))
                .await,
            Err(ApiError::Decode { status: 500, .. })
        ));
        let gone = ApiClient::new(&fake.socket().with_extension("none"));
        assert!(matches!(
            gone.instance_info().await,
            Err(ApiError::Connect { .. })
        ));
    }

    /// A socket file bound but not listening yet: what Firecracker's API socket is between
    /// its `bind` and its `listen`.
    fn bound_not_listening(path: &Path) -> std::os::fd::OwnedFd {
        use std::os::fd::{AsRawFd, FromRawFd};
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: socket(2) with constant arguments; the fd is owned from here on.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(fd >= 0, "{}", std::io::Error::last_os_error());
        // SAFETY: a fresh fd nobody else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.as_os_str().as_bytes();
        assert!(bytes.len() < addr.sun_path.len());
        for (to, from) in addr.sun_path.iter_mut().zip(bytes) {
            *to = *from as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes that outlives the call.
        let bound = unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) };
        assert_eq!(bound, 0, "{}", std::io::Error::last_os_error());
        fd
    }

    /// Under load a boot that waited only for the socket's path connected in the window
    /// between Firecracker's `bind` and `listen` and failed with "Connection refused"
    /// (jail_tests, about 1 run in 40 with the CPUs busy): the wait must see a listener.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_api_is_awaited_until_it_listens_not_until_its_path_exists() {
        use std::os::fd::AsRawFd;
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("api.sock");
        let fd = bound_not_listening(&socket);
        let client = ApiClient::new(&socket);
        assert!(socket.exists());
        match UnixStream::connect(&socket).await {
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused),
            Ok(_) => panic!("a bound socket accepted before listen"),
        }
        let me = std::process::id() as i32;
        let mut wait = tokio::spawn(async move { client.wait_listening(me, API_TIMEOUT).await });
        // Still waiting while nothing listens (a short look: it must not return early).
        assert!(
            tokio::time::timeout(Duration::from_millis(200), &mut wait)
                .await
                .is_err(),
            "the wait returned before the API listened"
        );
        // SAFETY: listen(2) on the socket this test owns.
        assert_eq!(unsafe { libc::listen(fd.as_raw_fd(), 8) }, 0);
        assert_eq!(wait.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn sends_json_bodies_and_reads_instance_info() {
        let fake = FakeApi::start().await;
        let client = ApiClient::new(fake.socket());
        client
            .call(&ApiRequest::vm_state(VmStateRequest::Paused))
            .await
            .unwrap();
        assert_eq!(fake.state(), InstanceState::Paused);
        assert_eq!(
            client.instance_info().await.unwrap().state,
            InstanceState::Paused
        );
        let seen = fake.requests();
        assert_eq!(seen[0].method, http::Method::PATCH);
        assert_eq!(seen[0].path, "/vm");
        assert_eq!(seen[0].content_type.as_deref(), Some("application/json"));
        assert_eq!(seen[0].body, Some(serde_json::json!({"state": "Paused"})));
        assert_eq!(seen[1].path, "/");
        assert_eq!(seen[1].body, None);
    }
}
