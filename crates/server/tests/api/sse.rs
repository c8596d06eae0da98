//! A minimal Server-Sent Events reader for tests.

use std::time::Duration;

use http::{Method, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use serde_json::Value;

use crate::harness::TestServer;

#[derive(Debug, Clone, PartialEq)]
pub struct SseEvent {
    pub id: u64,
    pub event: String,
    pub data: Value,
}

pub struct SseReader {
    body: Incoming,
    buf: String,
}

/// Opens the stream; the status, and a reader of its events.
pub async fn open_sse(
    server: &TestServer,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, SseReader) {
    let stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(Method::GET)
        .uri(path)
        .header("host", "berth")
        .header("authorization", format!("Bearer {}", server.key));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let response = sender
        .send_request(req.body(Empty::<bytes::Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    (
        status,
        SseReader {
            body: response.into_body(),
            buf: String::new(),
        },
    )
}

impl SseReader {
    /// The next event (comments skipped); panics after 10 s without one.
    pub async fn next(&mut self) -> SseEvent {
        tokio::time::timeout(Duration::from_secs(10), self.read())
            .await
            .expect("an SSE event within 10 s")
    }

    async fn read(&mut self) -> SseEvent {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..end + 2).collect();
                let (mut id, mut event, mut data) = (None, String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().parse().unwrap());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim().to_owned();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if let Some(id) = id {
                    return SseEvent {
                        id,
                        event,
                        data: serde_json::from_str(&data).unwrap(),
                    };
                }
                continue;
            }
            let frame = self
                .body
                .frame()
                .await
                .expect("the stream stays open")
                .unwrap();
            if let Ok(data) = frame.into_data() {
                self.buf.push_str(std::str::from_utf8(&data).unwrap());
            }
        }
    }
}
