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
