//! The calls that become a byte stream both ways (protocol version 3): a terminal's
//! attachment and a connection to an in-box port. Each is an HTTP/1.1 upgrade on its own
//! connection; the stream is that connection once the agent has answered `101`.
//! Also the terminal's other calls and `busy`, which ride along with them.

use berth_protocol::guest::Call;
use berth_protocol::ports::PORT_UPGRADE;
use berth_protocol::process::Busy;
use berth_protocol::terminal::{
    SignalRequest, TerminalInfo, TerminalList, TerminalRequest, TerminalSize, OFFSET_HEADER,
    TERMINAL_UPGRADE,
};
use bytes::Bytes;
use http::{Method, StatusCode};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;

use super::body::full;
use super::{check_status, GuestClient, GuestError};

/// An upgraded connection: the byte stream of a terminal or a port.
pub type GuestStream = TokioIo<Upgraded>;

/// An attached terminal: its stream, and the offset of the first output byte it carries.
#[derive(Debug)]
pub struct TerminalStream {
    pub stream: GuestStream,
    pub start: u64,
}

impl GuestClient {
    /// What work inside the box keeps it awake.
    pub async fn busy(&self) -> Result<Busy, GuestError> {
        self.call_json(Call::Busy, Method::GET, "/v1/busy", Bytes::new())
            .await
    }

    /// Starts a program on a new terminal.
    pub async fn terminal_open(&self, req: &TerminalRequest) -> Result<TerminalInfo, GuestError> {
        let body = Bytes::from(serde_json::to_vec(req)?);
        self.call_json(Call::TerminalOpen, Method::POST, "/v1/terminals", body)
            .await
    }

    /// Every terminal the agent holds (protocol version 5).
    pub async fn terminals(&self) -> Result<TerminalList, GuestError> {
        self.call_json(
            Call::TerminalList,
            Method::GET,
            "/v1/terminals",
            Bytes::new(),
        )
        .await
    }

    pub async fn terminal(&self, id: &str) -> Result<TerminalInfo, GuestError> {
        let uri = format!("/v1/terminals/{}", super::percent_encode(id));
        self.call_json(Call::TerminalGet, Method::GET, &uri, Bytes::new())
            .await
    }

    /// Attaches to a terminal from `offset` (default: where the last attachment stopped).
    pub async fn terminal_attach(
        &self,
        id: &str,
        offset: Option<u64>,
    ) -> Result<TerminalStream, GuestError> {
        let mut uri = format!("/v1/terminals/{}/attach", super::percent_encode(id));
        if let Some(offset) = offset {
            uri.push_str(&format!("?offset={offset}"));
        }
        let (stream, headers) = self
            .upgrade(Call::TerminalAttach, &uri, TERMINAL_UPGRADE)
            .await?;
        let start = headers
            .get(OFFSET_HEADER)
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .ok_or(GuestError::BadUpgrade {
                reason: "the terminal's 101 has no offset",
            })?;
        Ok(TerminalStream { stream, start })
    }

    pub async fn terminal_resize(&self, id: &str, size: TerminalSize) -> Result<(), GuestError> {
        let uri = format!("/v1/terminals/{}/resize", super::percent_encode(id));
        let body = Bytes::from(serde_json::to_vec(&size)?);
        self.send(Call::TerminalResize, Method::POST, &uri, body)
            .await
            .map(drop)
    }

    pub async fn terminal_signal(&self, id: &str, signal: &str) -> Result<(), GuestError> {
        let uri = format!("/v1/terminals/{}/signal", super::percent_encode(id));
        let body = Bytes::from(serde_json::to_vec(&SignalRequest {
            signal: signal.to_owned(),
        })?);
        self.send(Call::TerminalSignal, Method::POST, &uri, body)
            .await
            .map(drop)
    }

    /// A TCP connection to `127.0.0.1:<port>` inside the box. Nothing listening there is
    /// `Remote` with `unavailable`.
    pub async fn port_connect(&self, port: u16) -> Result<GuestStream, GuestError> {
        let uri = format!("/v1/ports/{port}");
        Ok(self.upgrade(Call::PortConnect, &uri, PORT_UPGRADE).await?.0)
    }

    /// Sends an upgrade request on a fresh connection and, on `101`, hands back the stream.
    async fn upgrade(
        &self,
        call: Call,
        uri: &str,
        protocol: &'static str,
    ) -> Result<(GuestStream, http::HeaderMap), GuestError> {
        self.require(call).await?;
        let stream = self.connect().await?;
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            // Lives as long as the upgraded stream.
            let _ = conn.with_upgrades().await;
        });
        let request = self
            .builder(Method::GET, uri)
            .header(http::header::CONNECTION, "upgrade")
            .header(http::header::UPGRADE, protocol)
            .body(full(Bytes::new()))
            .expect("a request built from a valid method and path");
        let response = sender.send_request(request).await?;
        if response.status() != StatusCode::SWITCHING_PROTOCOLS {
            check_status(response).await?;
            return Err(GuestError::BadUpgrade {
                reason: "the agent answered without switching protocols",
            });
        }
        let headers = response.headers().clone();
        let upgraded = hyper::upgrade::on(response).await?;
        Ok((TokioIo::new(upgraded), headers))
    }
}
