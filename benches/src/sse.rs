//! A minimal Server-Sent Events reader for the benchmarks: one connection to
//! `GET /v1/boxes/{ref}/events`, yielding each event's type and JSON as it arrives.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

/// One event: the SSE `event:` field and the parsed `data:`.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: String,
    pub data: serde_json::Value,
}

pub struct EventStream {
    body: Incoming,
    buf: Vec<u8>,
    kind: Option<String>,
    data: Option<String>,
    ready: std::collections::VecDeque<Event>,
}

impl EventStream {
    /// Opens the stream and returns once the daemon has answered `200` (so the stream is
    /// live before anything the caller does next).
    pub async fn open(addr: SocketAddr, key: &str, path: &str) -> std::io::Result<EventStream> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        let request = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(http::header::HOST, "localhost")
            .header(http::header::ACCEPT, "text/event-stream")
            .header(http::header::AUTHORIZATION, format!("Bearer {key}"))
            .body(Empty::<Bytes>::new())
            .map_err(std::io::Error::other)?;
        let response = sender
            .send_request(request)
            .await
            .map_err(std::io::Error::other)?;
        if response.status() != StatusCode::OK {
            return Err(std::io::Error::other(format!(
                "GET {path}: {}",
                response.status()
            )));
        }
        Ok(EventStream {
            body: response.into_body(),
            buf: Vec::new(),
            kind: None,
            data: None,
            ready: Default::default(),
        })
    }

    /// The next event; an error when the stream ends.
    pub async fn next(&mut self) -> std::io::Result<Event> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Ok(event);
            }
            let frame = self
                .body
                .frame()
                .await
                .ok_or_else(|| std::io::Error::other("the event stream ended"))?
                .map_err(std::io::Error::other)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            self.buf.extend_from_slice(&data);
            while let Some(end) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                let line = String::from_utf8_lossy(&line);
                self.line(line.trim_end_matches(['\n', '\r']))?;
            }
        }
    }

    fn line(&mut self, line: &str) -> std::io::Result<()> {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                let data = serde_json::from_str(&data).map_err(std::io::Error::other)?;
                self.ready.push_back(Event {
                    kind: self.kind.take().unwrap_or_else(|| "message".into()),
                    data,
                });
            }
            return Ok(());
        }
        if line.starts_with(':') {
            return Ok(());
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => self.kind = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {}
        }
        Ok(())
    }
}
