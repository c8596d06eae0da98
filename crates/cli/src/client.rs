//! A small HTTP/1.1 client for berth's public API, on hyper's connection API (one
//! connection per call, plain or TLS through [`crate::connector`]). Request bodies may stream (file uploads) and responses
//! are handed back unread, so callers can stream them too (exec frames, downloads).

use std::time::Duration;

use berth_protocol::{ErrorBody, ErrorCode};
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HOST};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, Limited};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;

use crate::connector::{self, DaemonStream, Trust};
use crate::target::{DaemonUrl, Target};

/// A request body: empty, a JSON document, or a stream (uploads).
pub type ReqBody = BoxBody<Bytes, std::io::Error>;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How much of an error answer we read; berth's error bodies are tiny.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;
/// How much of a JSON answer we read (a box list of thousands of boxes fits easily).
const MAX_JSON_BODY_BYTES: usize = 64 * 1024 * 1024;
/// The largest WebSocket message read from the daemon (terminal output comes in 32 KiB).
const MAX_WEBSOCKET_MESSAGE_BYTES: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(
        "cannot reach the berth daemon ({}); is `berth up` running? (tried {url})",
        describe_io(cause)
    )]
    Connect {
        url: DaemonUrl,
        cause: std::io::Error,
    },

    #[error("connecting to the berth daemon timed out after {}s; is `berth up` running? (tried {url})", CONNECT_TIMEOUT.as_secs())]
    ConnectTimeout { url: DaemonUrl },

    #[error("TLS with the berth daemon at {url} failed{}", tls_hint(trust))]
    Tls {
        url: DaemonUrl,
        trust: Trust,
        #[source]
        source: std::io::Error,
    },

    #[error("talking to the berth daemon at {url}")]
    Http {
        url: DaemonUrl,
        #[source]
        source: hyper::Error,
    },

    #[error("cannot build the request (is the API key valid?)")]
    Request(#[source] http::Error),

    /// The daemon answered with berth's error body.
    #[error("{message}{hint}")]
    Api {
        status: StatusCode,
        code: ErrorCode,
        message: String,
        hint: String,
    },

    /// Something answered, but not with berth's error body (another server on that port?).
    #[error("the daemon at {url} answered {status}: {excerpt}")]
    UnexpectedStatus {
        url: DaemonUrl,
        status: StatusCode,
        excerpt: String,
    },

    #[error("reading the daemon's answer")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),

    #[error("WebSocket to the berth daemon at {url}")]
    WebSocket {
        url: DaemonUrl,
        #[source]
        source: Box<tokio_tungstenite::tungstenite::Error>,
    },

    #[error("the daemon's answer is not the JSON expected ({what})")]
    Decode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// The daemon could not be reached or the connection broke: worth retrying later (the
    /// daemon may be restarting). An answer from the daemon is never transient here.
    /// The daemon said `503 unavailable`: what the call needs is away for now (a box's
    /// node that is down or being replaced), and the same call may work in a moment.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, ClientError::Api { status, .. } if *status == StatusCode::SERVICE_UNAVAILABLE)
    }

    pub fn is_transport(&self) -> bool {
        match self {
            ClientError::Connect { .. }
            | ClientError::ConnectTimeout { .. }
            | ClientError::Http { .. }
            | ClientError::Body(_)
            | ClientError::WebSocket { .. } => true,
            ClientError::Request(_)
            | ClientError::Tls { .. }
            | ClientError::Api { .. }
            | ClientError::UnexpectedStatus { .. }
            | ClientError::Decode { .. } => false,
        }
    }
}

/// The command that lists what a "no such …" answer (`message`) did not find.
fn next_step(message: &str) -> Option<&'static str> {
    [
        ("no box ", "berth box ls"),
        ("no tenant ", "berth tenant ls"),
        ("no API key ", "berth tenant key ls TENANT"),
        ("no process ", "berth process ls NAME"),
        ("no service ", "berth service ls NAME"),
        ("no share link ", "berth port links NAME"),
        ("no secret ", "berth secret ls"),
    ]
    .into_iter()
    .find(|(prefix, _)| message.starts_with(prefix))
    .map(|(_, command)| command)
}

#[derive(Debug, Clone)]
pub struct Client {
    target: Target,
}

impl Client {
    pub fn new(target: Target) -> Client {
        Client { target }
    }

    /// Sends one request and returns the response if its status is a success; any other
    /// status becomes [`ClientError::Api`] (or `UnexpectedStatus`). The body is not read.
    pub async fn send(
        &self,
        method: Method,
        path_and_query: &str,
        accept: &str,
        content_type: Option<&str>,
        content_length: Option<u64>,
        body: ReqBody,
    ) -> Result<Response<Incoming>, ClientError> {
        self.send_with_headers(
            method,
            path_and_query,
            accept,
            content_type,
            content_length,
            &[],
            body,
        )
        .await
    }

    /// Like [`Client::send`], with extra request headers (e.g. `Last-Event-ID`).
    #[allow(clippy::too_many_arguments)]
    pub async fn send_with_headers(
        &self,
        method: Method,
        path_and_query: &str,
        accept: &str,
        content_type: Option<&str>,
        content_length: Option<u64>,
        headers: &[(&'static str, String)],
        body: ReqBody,
    ) -> Result<Response<Incoming>, ClientError> {
        let response = self
            .answer(
                method,
                path_and_query,
                accept,
                content_type,
                content_length,
                headers,
                body,
            )
            .await?;
        if response.status().is_success() {
            Ok(response)
        } else {
            Err(self.error_from(response).await)
        }
    }

    /// Sends one request and returns the daemon's answer, whatever its status, unread
    /// (`berth mcp` reads berth's error bodies itself).
    #[allow(clippy::too_many_arguments)]
    pub async fn answer(
        &self,
        method: Method,
        path_and_query: &str,
        accept: &str,
        content_type: Option<&str>,
        content_length: Option<u64>,
        headers: &[(&'static str, String)],
        body: ReqBody,
    ) -> Result<Response<Incoming>, ClientError> {
        let url = &self.target.url;
        let stream = self.dial().await?;
        let http_err = |source| ClientError::Http {
            url: url.clone(),
            source,
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(http_err)?;
        // The connection future drives the socket; it ends when the response body is read
        // (or dropped) and `sender` is gone.
        tokio::spawn(async move {
            let _ = conn.await;
        });

        let mut builder = Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(HOST, url.authority())
            .header(ACCEPT, accept);
        builder = builder.header(AUTHORIZATION, self.bearer()?);
        if let Some(ct) = content_type {
            builder = builder.header(CONTENT_TYPE, ct);
        }
        if let Some(len) = content_length {
            builder = builder.header(http::header::CONTENT_LENGTH, len);
        }
        for (name, value) in headers {
            builder = builder.header(*name, value.as_str());
        }
        let request = builder.body(body).map_err(ClientError::Request)?;

        sender.send_request(request).await.map_err(http_err)
    }

    /// A WebSocket to `path_and_query` (a terminal). An HTTP answer instead of the upgrade
    /// becomes [`ClientError::Api`] like any other call's.
    pub async fn websocket(
        &self,
        path_and_query: &str,
    ) -> Result<WebSocketStream<DaemonStream>, ClientError> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
        let url = &self.target.url;
        let scheme = if url.is_tls() { "wss" } else { "ws" };
        let mut request = format!("{scheme}://{}{path_and_query}", url.authority())
            .into_client_request()
            .map_err(|e| ClientError::WebSocket {
                url: url.clone(),
                source: Box::new(e),
            })?;
        request.headers_mut().insert(AUTHORIZATION, self.bearer()?);
        let stream = self.dial().await?;
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_WEBSOCKET_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_WEBSOCKET_MESSAGE_BYTES));
        match tokio_tungstenite::client_async_with_config(request, stream, Some(config)).await {
            Ok((socket, _response)) => Ok(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let (parts, body) = (*response).into_parts();
                let body = Full::new(Bytes::from(body.unwrap_or_default()));
                Err(self.error_from(Response::from_parts(parts, body)).await)
            }
            Err(e) => Err(ClientError::WebSocket {
                url: url.clone(),
                source: Box::new(e),
            }),
        }
    }

    /// A connection to the daemon: TCP, with TLS for `https://`.
    async fn dial(&self) -> Result<DaemonStream, ClientError> {
        let url = &self.target.url;
        let stream = match tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(url.authority()),
        )
        .await
        {
            Ok(Ok(stream)) => stream,
            Ok(Err(cause)) => {
                return Err(ClientError::Connect {
                    url: url.clone(),
                    cause,
                })
            }
            Err(_elapsed) => return Err(ClientError::ConnectTimeout { url: url.clone() }),
        };
        // Exec frames and keystrokes are small and interactive; no Nagle delay for them.
        let _ = stream.set_nodelay(true);
        if !url.is_tls() {
            return Ok(DaemonStream::Plain(stream));
        }
        let trust = &self.target.trust;
        let handshake = connector::tls(stream, url.host(), trust);
        match tokio::time::timeout(CONNECT_TIMEOUT, handshake).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(source)) => Err(ClientError::Tls {
                url: url.clone(),
                trust: trust.clone(),
                source,
            }),
            Err(_elapsed) => Err(ClientError::ConnectTimeout { url: url.clone() }),
        }
    }

    fn bearer(&self) -> Result<HeaderValue, ClientError> {
        HeaderValue::try_from(format!("Bearer {}", self.target.api_key))
            .map(|mut v| {
                v.set_sensitive(true);
                v
            })
            .map_err(|e| ClientError::Request(e.into()))
    }

    /// A call with an optional JSON body whose answer is JSON.
    pub async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
        what: &'static str,
    ) -> Result<T, ClientError> {
        let bytes = self.call(method, path, body).await?;
        serde_json::from_slice(&bytes).map_err(|source| ClientError::Decode { what, source })
    }

    /// A call with an optional JSON body whose answer carries nothing we need (`204`).
    pub async fn no_content(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<(), ClientError> {
        self.call(method, path, body).await.map(drop)
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&impl Serialize>,
    ) -> Result<Bytes, ClientError> {
        let (content_type, body) = match body {
            Some(value) => {
                let json = serde_json::to_vec(value).map_err(|source| ClientError::Decode {
                    what: "request body",
                    source,
                })?;
                (Some("application/json"), full(json))
            }
            None => (None, empty()),
        };
        let response = self
            .send(method, path, "application/json", content_type, None, body)
            .await?;
        read_limited(response.into_body(), MAX_JSON_BODY_BYTES).await
    }

    async fn error_from<B>(&self, response: Response<B>) -> ClientError
    where
        B: hyper::body::Body<Data = Bytes> + Send + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let status = response.status();
        let bytes = read_limited(response.into_body(), MAX_ERROR_BODY_BYTES)
            .await
            .unwrap_or_default();
        match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(body) => {
                let hint = match body.error.code {
                    ErrorCode::Unauthorized => {
                        format!(" (the API key from {} was refused)", self.target.key_source)
                    }
                    ErrorCode::NotFound => next_step(&body.error.message)
                        .map(|command| format!("; see `{command}`"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                ClientError::Api {
                    status,
                    code: body.error.code,
                    message: body.error.message,
                    hint,
                }
            }
            Err(_) => {
                let text = String::from_utf8_lossy(&bytes);
                let mut excerpt: String = text.trim().chars().take(200).collect();
                if excerpt.is_empty() {
                    excerpt = "(no body)".into();
                }
                ClientError::UnexpectedStatus {
                    url: self.target.url.clone(),
                    status,
                    excerpt,
                }
            }
        }
    }
}

/// What to check when a handshake fails, by what the certificate was held against.
fn tls_hint(trust: &Trust) -> &'static str {
    match trust {
        Trust::Pinned(_) => {
            " (the local daemon's certificate is not the one in berth.cert: is another \
             server on that port, or did `berth up` restart with other files?)"
        }
        Trust::WebRoots => " (its certificate is not valid for that name from a public root)",
    }
}

/// `connection refused` rather than `Connection refused (os error 111)`.
fn describe_io(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        _ => err.to_string(),
    }
}

pub fn empty() -> ReqBody {
    Empty::new().map_err(|never| match never {}).boxed()
}

pub fn full(bytes: impl Into<Bytes>) -> ReqBody {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

async fn read_limited<B>(body: B, limit: usize) -> Result<Bytes, ClientError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Limited::new(body, limit)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(ClientError::Body)
}

pub use berth_basics::{path_segment, query_value};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_not_found_answer_names_the_command_that_lists_what_exists() {
        assert_eq!(next_step("no box \"x\""), Some("berth box ls"));
        assert_eq!(next_step("no secret named \"gh\""), Some("berth secret ls"));
        assert_eq!(
            next_step("no service \"db\" in box alice"),
            Some("berth service ls NAME")
        );
        assert_eq!(next_step("not here"), None);
    }
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    /// A one-shot HTTP server that answers the first request with `status` and `body`,
    /// and returns the request head it saw.
    async fn canned(status: &str, body: &str) -> (Client, tokio::task::JoinHandle<String>) {
        let response = format!(
            "HTTP/1.1 {status}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                sock.read_exact(&mut byte).await.unwrap();
                head.push(byte[0]);
            }
            sock.write_all(response.as_bytes()).await.unwrap();
            sock.shutdown().await.unwrap();
            String::from_utf8(head).unwrap()
        });
        let target = Target {
            url: DaemonUrl::parse(&addr.to_string(), "test").unwrap(),
            api_key: "berth_k".into(),
            key_source: "/d/admin.key".into(),
            trust: Trust::WebRoots,
        };
        (Client::new(target), server)
    }

    #[tokio::test]
    async fn json_answers_are_decoded_and_the_key_is_sent() {
        let (client, server) = canned("200 OK", r#"{"boxes":[]}"#).await;
        let value: serde_json::Value = client
            .json(Method::GET, "/v1/boxes", None::<&()>, "a box list")
            .await
            .unwrap();
        assert_eq!(value, serde_json::json!({"boxes":[]}));
        let head = server.await.unwrap().to_ascii_lowercase();
        assert!(head.starts_with("get /v1/boxes http/1.1"), "{head}");
        assert!(head.contains("authorization: bearer berth_k"), "{head}");
    }

    #[tokio::test]
    async fn api_errors_carry_the_server_message_and_a_hint() {
        let body = r#"{"error":{"code":"unauthorized","message":"bad key!"}}"#;
        let (client, _server) = canned("401 Unauthorized", body).await;
        let err = client
            .no_content(Method::DELETE, "/v1/boxes/a", None::<&()>)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                ClientError::Api {
                    code: ErrorCode::Unauthorized,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "bad key! (the API key from /d/admin.key was refused)"
        );
    }

    #[tokio::test]
    async fn other_servers_are_reported_with_their_status() {
        let (client, _server) = canned("502 Bad Gateway", "oops!").await;
        let err = client
            .no_content(Method::GET, "/v1/boxes", None::<&()>)
            .await
            .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("502") && msg.contains("oops!"), "{msg}");
    }
}
