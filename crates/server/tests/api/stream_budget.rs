//! One budget of long-lived streams per tenant (`[server] max_streams_per_tenant`), on a
//! real sandbox box: process output, a streaming exec, an event stream, a file watch, a
//! terminal, and a box's port (a request whose answer streams, and a WebSocket) each take a
//! slot of it. With a budget of one, while any one of them is open every kind is refused
//! at once with `429 too_many_requests` and `Retry-After`; when it ends, its slot comes back.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::harness::{error_code, TestServer};
use crate::ports::serving_host;

/// The port app's port in box `web` (`ports.rs`).
const APP_PORT: u16 = 8001;

/// The kinds of stream, each as the request that opens one.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    ProcessOutput,
    StreamingExec,
    Events,
    FileWatch,
    Terminal,
    PortRequest,
    PortWebSocket,
}

const KINDS: [Kind; 7] = [
    Kind::ProcessOutput,
    Kind::StreamingExec,
    Kind::Events,
    Kind::FileWatch,
    Kind::Terminal,
    Kind::PortRequest,
    Kind::PortWebSocket,
];

/// An open stream: dropping it closes its connection.
enum Open {
    Http {
        _response: http::Response<hyper::body::Incoming>,
        _sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    },
    WebSocket {
        _socket: Box<tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>>,
    },
}

/// A refusal: its status, `Retry-After`, and the error body.
#[derive(Debug)]
struct Refused {
    status: StatusCode,
    retry_after: Option<String>,
    body: Value,
}

struct Budget {
    server: TestServer,
    /// The background process followed by [`Kind::ProcessOutput`].
    process: String,
}

impl Budget {
    async fn open(&self, kind: Kind) -> Result<Open, Refused> {
        let (method, path, headers, body): (_, String, Vec<(&str, &str)>, _) = match kind {
            Kind::ProcessOutput => (
                Method::GET,
                format!("/v1/boxes/web/processes/{}/output", self.process),
                vec![],
                Bytes::new(),
            ),
            Kind::StreamingExec => (
                Method::POST,
                "/v1/boxes/web/exec".into(),
                vec![("accept", "application/x-ndjson")],
                Bytes::from(json!({"cmd": ["sleep", "600"]}).to_string()),
            ),
            Kind::Events => (
                Method::GET,
                "/v1/boxes/web/events".into(),
                vec![],
                Bytes::new(),
            ),
            Kind::FileWatch => (
                Method::GET,
                "/v1/boxes/web/files/watch?path=/home/user".into(),
                vec![],
                Bytes::new(),
            ),
            // An answer of 1 GiB, unread: the proxied request lasts while it is held.
            Kind::PortRequest => (
                Method::GET,
                format!("/v1/boxes/web/ports/{APP_PORT}/big?n=1073741824"),
                vec![],
                Bytes::new(),
            ),
            Kind::Terminal => return self.websocket("/v1/boxes/web/pty").await,
            Kind::PortWebSocket => {
                return self
                    .websocket(&format!("/v1/boxes/web/ports/{APP_PORT}/ws"))
                    .await
            }
        };
        let stream = tokio::net::TcpStream::connect(self.server.addr)
            .await
            .unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "berth")
            .header("authorization", format!("Bearer {}", self.server.key));
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let response = sender
            .send_request(request.body(Full::new(body)).unwrap())
            .await
            .unwrap();
        if response.status() == StatusCode::OK {
            return Ok(Open::Http {
                _response: response,
                _sender: sender,
            });
        }
        let (parts, body) = response.into_parts();
        Err(refused(
            parts.status,
            &parts.headers,
            &body.collect().await.unwrap().to_bytes(),
        ))
    }

    async fn websocket(&self, path: &str) -> Result<Open, Refused> {
        let mut request = format!("ws://{}{path}", self.server.addr)
            .into_client_request()
            .unwrap();
        request.headers_mut().insert(
            "authorization",
            format!("Bearer {}", self.server.key).parse().unwrap(),
        );
        let tcp = tokio::net::TcpStream::connect(self.server.addr)
            .await
            .unwrap();
        match tokio_tungstenite::client_async(request, tcp).await {
            Ok((socket, _)) => Ok(Open::WebSocket {
                _socket: Box::new(socket),
            }),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                let body = response.body().clone().unwrap_or_default();
                Err(refused(response.status(), response.headers(), &body))
            }
            Err(e) => panic!("{path}: WebSocket connect: {e}"),
        }
    }

    /// Opens `kind`, retrying while the tenant's budget is still full: a closed stream's
    /// slot comes back once the daemon sees its connection end.
    async fn open_when_free(&self, kind: Kind) -> Open {
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            match self.open(kind).await {
                Ok(open) => return open,
                Err(refused) if refused.status == StatusCode::TOO_MANY_REQUESTS => {
                    assert!(
                        Instant::now() < deadline,
                        "{kind:?}: the slot never came back: {refused:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(refused) => panic!("{kind:?} failed: {refused:?}"),
            }
        }
    }
}

fn refused(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Refused {
    Refused {
        status,
        retry_after: headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        body: serde_json::from_slice(body)
            .unwrap_or_else(|_| json!({"not json": String::from_utf8_lossy(body).into_owned()})),
    }
}

/// A daemon on the sandbox with a stream budget of one, box `web` running the port app
/// (`ports.rs`), and a background process that prints nothing and runs until the box stops.
async fn budget_of_one() -> Option<Budget> {
    let server = serving_host(|host| host.server.max_streams_per_tenant = 1).await?;
    let (status, started) = server
        .call(
            Method::POST,
            "/v1/boxes/web/exec",
            Some(json!({"cmd": ["sleep", "100000"], "background": true})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    let process = started["id"].as_str().unwrap().to_owned();
    Some(Budget { server, process })
}

#[tokio::test]
async fn every_kind_of_stream_takes_a_slot_of_the_tenants_one_budget() {
    let Some(budget) = budget_of_one().await else {
        return;
    };
    for holder in KINDS {
        // Opened when free: the stream held before it may take a moment to be seen closed.
        let held = budget.open_when_free(holder).await;
        for kind in KINDS {
            let refusal = match budget.open(kind).await {
                Ok(_) => panic!("{kind:?} was served while {holder:?} held the one stream slot"),
                Err(refusal) => refusal,
            };
            assert_eq!(
                refusal.status,
                StatusCode::TOO_MANY_REQUESTS,
                "{kind:?} while {holder:?} is open: {refusal:?}"
            );
            assert_eq!(
                error_code(&refusal.body),
                "too_many_requests",
                "{refusal:?}"
            );
            assert!(
                refusal.retry_after.is_some(),
                "{kind:?}: a 429 without Retry-After"
            );
        }
        eprintln!("{holder:?} holds the slot: every kind refused");
        drop(held);
    }
    // The last one's slot comes back too, and the box's processes and ports still work.
    let _again = budget.open_when_free(Kind::Events).await;
    let (status, list) = budget
        .server
        .call(Method::GET, "/v1/boxes/web/processes", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{list}");
}
