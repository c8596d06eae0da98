//! A minimal HTTP/1.1 client for the benchmarks: one keep-alive connection to the daemon.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

pub struct Client {
    sender: SendRequest<Full<Bytes>>,
    key: String,
}

impl Client {
    pub async fn connect(addr: SocketAddr, key: &str) -> std::io::Result<Client> {
        let stream = tokio::net::TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(std::io::Error::other)?;
        tokio::spawn(conn);
        Ok(Client {
            sender,
            key: key.to_owned(),
        })
    }

    /// Sends a JSON request; returns the status and the parsed body (`Null` when empty).
    pub async fn call(
        &mut self,
        method: Method,
        path: &str,
        body: serde_json::Value,
    ) -> std::io::Result<(StatusCode, serde_json::Value)> {
        let body = if body.is_null() {
            Bytes::new()
        } else {
            Bytes::from(body.to_string())
        };
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::HOST, "localhost")
            .header(http::header::AUTHORIZATION, format!("Bearer {}", self.key))
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(std::io::Error::other)?;
        self.sender.ready().await.map_err(std::io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(std::io::Error::other)?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        let value = if bytes.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(std::io::Error::other)?
        };
        Ok((status, value))
    }
}

impl Client {
    /// `GET path`; the status and the body's bytes as they came (a PNG, a file).
    pub async fn get_bytes(&mut self, path: &str) -> std::io::Result<(StatusCode, Bytes)> {
        let request = Request::builder()
            .method(Method::GET)
            .uri(path)
            .header(http::header::HOST, "localhost")
            .header(http::header::AUTHORIZATION, format!("Bearer {}", self.key))
            .body(Full::new(Bytes::new()))
            .map_err(std::io::Error::other)?;
        self.sender.ready().await.map_err(std::io::Error::other)?;
        let response = self
            .sender
            .send_request(request)
            .await
            .map_err(std::io::Error::other)?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?
            .to_bytes();
        Ok((status, bytes))
    }
}

/// `Ok` when the answer's status is the one wanted, else what went wrong, with the body.
pub fn expect(
    got: StatusCode,
    want: StatusCode,
    what: &str,
    body: &serde_json::Value,
) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: expected {want}, got {got}: {body}"))
    }
}
