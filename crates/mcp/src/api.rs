//! The one thing the tools need from berth: a call to its own HTTP API (docs/api.md) on a
//! caller's behalf. Two implementations exist: `berth mcp` sends it over HTTP to the daemon
//! (`crates/cli`), and the daemon's `/mcp` hands it to its own router in process
//! (`crates/server`). Either way auth, tenant scoping, validation and error bodies are the
//! API's, written once; the tools only choose paths and read answers.

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;

/// Any error a body may fail with (hyper's, axum's).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// An answer's body, unread: the tools read it through [`crate::answer`], which bounds what
/// is kept, so an implementation never buffers it.
pub type AnswerBody = UnsyncBoxBody<Bytes, BoxError>;

/// Who a tool call acts for: the API key its MCP client presented (`/mcp`'s bearer key, or
/// `berth mcp`'s `BERTH_API_KEY`). Every API call made for the tool carries this key, so
/// the tool sees exactly what the key's tenant may see.
#[derive(Clone)]
pub struct Caller {
    key: String,
    /// `Host` and `X-Forwarded-Proto` of the MCP request, for answers that spell out URLs
    /// to berth (a port's URL); `None` over stdio, where the HTTP client sets its own.
    pub host: Option<HeaderValue>,
    pub forwarded_proto: Option<HeaderValue>,
}

impl Caller {
    pub fn new(key: impl Into<String>) -> Caller {
        Caller {
            key: key.into(),
            host: None,
            forwarded_proto: None,
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }
}

/// Never prints the key.
impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("key", &"<redacted>")
            .field("host", &self.host)
            .finish()
    }
}

/// A request body: none, a JSON document, or raw bytes (a file's contents).
#[derive(Debug, Clone)]
pub enum RequestBody {
    Empty,
    Json(serde_json::Value),
    Bytes(Bytes),
}

impl RequestBody {
    /// The `Content-Type` the body is sent with.
    pub fn content_type(&self) -> Option<&'static str> {
        match self {
            RequestBody::Empty => None,
            RequestBody::Json(_) => Some("application/json"),
            RequestBody::Bytes(_) => Some("application/octet-stream"),
        }
    }

    /// The bytes on the wire.
    pub fn into_bytes(self) -> Bytes {
        match self {
            RequestBody::Empty => Bytes::new(),
            // A `Value` always serializes.
            RequestBody::Json(value) => Bytes::from(value.to_string()),
            RequestBody::Bytes(bytes) => bytes,
        }
    }
}

/// One API call: `/v1/…` path with its query, already percent-encoded.
#[derive(Debug, Clone)]
pub struct ApiRequest {
    pub method: Method,
    pub path_and_query: String,
    /// `application/json`, or a stream's type (`application/x-ndjson`, `text/event-stream`).
    pub accept: &'static str,
    pub body: RequestBody,
}

impl ApiRequest {
    pub fn get(path_and_query: impl Into<String>) -> ApiRequest {
        ApiRequest {
            method: Method::GET,
            path_and_query: path_and_query.into(),
            accept: "application/json",
            body: RequestBody::Empty,
        }
    }

    pub fn with_json(
        method: Method,
        path_and_query: impl Into<String>,
        body: serde_json::Value,
    ) -> ApiRequest {
        ApiRequest {
            method,
            path_and_query: path_and_query.into(),
            accept: "application/json",
            body: RequestBody::Json(body),
        }
    }

    pub fn accepting(mut self, accept: &'static str) -> ApiRequest {
        self.accept = accept;
        self
    }
}

/// The API's answer, whatever its status: errors are read by the tools (berth's error body).
pub struct ApiAnswer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: AnswerBody,
}

/// The call could not be made or answered at all (the daemon is down, the connection broke).
/// An answer with an error status is not this: it is an [`ApiAnswer`].
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct TransportError {
    pub message: String,
    #[source]
    pub source: Option<BoxError>,
}

/// berth's HTTP API, as the tools call it.
#[async_trait::async_trait]
pub trait Api: Send + Sync + 'static {
    async fn call(&self, caller: &Caller, request: ApiRequest)
        -> Result<ApiAnswer, TransportError>;
}
