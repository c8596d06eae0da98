//! One intercepted stream: TLS from the box (replaying its ClientHello), one request head
//! checked and rewritten, TLS upstream, then body and response streamed as they come.

use std::io;
use std::sync::Arc;

use rustls::pki_types::{InvalidDnsNameError, ServerName};
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::{timeout_at, Instant};
use tokio_rustls::{TlsAcceptor, TlsConnector};

use super::body::copy_body;
use super::ca::CaError;
use super::http1::{read_head, rewrite_request, HeadReadError, Kind, Refusal};
use super::replay::Replay;
use super::response::{relay_response, Relayed};
use super::{provider, Interceptor};

/// An intercepted request that went upstream. Errors after that point (a reset mid-body,
/// a malformed response) are the normal end of a connection and are kept for logging.
#[derive(Debug)]
pub struct Served {
    /// The name of the rule whose secret was set, if any.
    pub injected: Option<String>,
    /// The rule whose placeholder the request carried outside its methods or paths.
    pub withheld: Option<super::WithheldFrom>,
    /// The response was not relayed: its body was encoded (`Content-Encoding`), which
    /// could hide a secret from the scrubber; the box got a 502.
    pub encoded_response: bool,
    pub stream_error: Option<io::Error>,
}

/// Why an intercepted stream ended before its request went upstream. None of these carries
/// a header value.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    #[error("minting the leaf certificate")]
    Ca(#[source] CaError),
    #[error("building the box-side TLS configuration")]
    ServerConfig(#[source] rustls::Error),
    #[error("TLS handshake with the box")]
    BoxTls(#[source] io::Error),
    #[error("the box took too long for its handshake or request head")]
    BoxTimeout,
    #[error("reading the request head")]
    RequestHead(#[source] HeadReadError),
    #[error("request refused: {0}")]
    Refused(#[source] Refusal),
    #[error("the server name is not a DNS name")]
    ServerName(#[source] InvalidDnsNameError),
    #[error("TLS handshake with upstream")]
    UpstreamTls(#[source] io::Error),
    #[error("the upstream TLS handshake timed out")]
    UpstreamTimeout,
    #[error("writing the request upstream")]
    UpstreamWrite(#[source] io::Error),
}

impl Interceptor {
    /// Serves one stream of the box to `sni` (canonical, already allowed and intercepted):
    /// `client_hello` is what the gateway read from `box_stream` to make its decision, and
    /// `upstream` is the connection to the vetted address.
    pub async fn serve<S, U>(
        &self,
        sni: &str,
        box_stream: S,
        client_hello: Vec<u8>,
        upstream: U,
    ) -> Result<Served, InterceptError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
        U: AsyncRead + AsyncWrite + Unpin,
    {
        let leaf = self.ca.leaf(sni).map_err(InterceptError::Ca)?;
        let mut server = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(InterceptError::ServerConfig)?
            .with_no_client_auth()
            .with_single_cert(leaf.chain.clone(), leaf.key())
            .map_err(InterceptError::ServerConfig)?;
        // Only HTTP/1.1: an HTTP/2 client that also offers it falls back.
        server.alpn_protocols = vec![b"http/1.1".to_vec()];

        let deadline = Instant::now() + self.handshake_timeout;
        let acceptor = TlsAcceptor::from(Arc::new(server));
        let mut from_box = timeout_at(
            deadline,
            acceptor.accept(Replay::new(client_hello, box_stream)),
        )
        .await
        .map_err(|_| InterceptError::BoxTimeout)?
        .map_err(InterceptError::BoxTls)?;

        let mut buf = Vec::new();
        let head_len =
            match timeout_at(deadline, read_head(&mut from_box, &mut buf, Kind::Request)).await {
                Err(_) => return Err(InterceptError::BoxTimeout),
                Ok(Ok(n)) => n,
                Ok(Err(e)) => {
                    let status = match &e {
                        HeadReadError::TooLarge => Some(Refusal::TooLarge.status()),
                        HeadReadError::Malformed(_) => Some(Refusal::BadRequest.status()),
                        HeadReadError::Read(_) | HeadReadError::Closed => None,
                    };
                    if let Some(status) = status {
                        answer(&mut from_box, status).await;
                    }
                    return Err(InterceptError::RequestHead(e));
                }
            };
        let rewritten = match rewrite_request(&buf[..head_len], sni, &self.rules) {
            Ok(r) => r,
            Err(refusal) => {
                answer(&mut from_box, refusal.status()).await;
                return Err(InterceptError::Refused(refusal));
            }
        };

        let name = ServerName::try_from(sni.to_owned()).map_err(InterceptError::ServerName)?;
        let connector = TlsConnector::from(self.upstream.clone());
        let deadline = Instant::now() + self.handshake_timeout;
        let mut to_upstream = match timeout_at(deadline, connector.connect(name, upstream)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                answer(&mut from_box, "502 Bad Gateway").await;
                return Err(InterceptError::UpstreamTls(e));
            }
            Err(_) => {
                answer(&mut from_box, "504 Gateway Timeout").await;
                return Err(InterceptError::UpstreamTimeout);
            }
        };
        let sent = async {
            to_upstream.write_all(&rewritten.head).await?;
            to_upstream.flush().await
        };
        if let Err(e) = sent.await {
            answer(&mut from_box, "502 Bad Gateway").await;
            return Err(InterceptError::UpstreamWrite(e));
        }
        drop(rewritten.head);
        let body_start = buf.split_off(head_len);
        drop(buf);

        let (box_r, mut box_w) = tokio::io::split(from_box);
        let (mut up_r, mut up_w) = tokio::io::split(to_upstream);
        // Exactly this request's body goes up, as it comes; then the box is no longer read,
        // so nothing after it reaches upstream unchecked. Upstream was told
        // `Connection: close`: it answers this one request and closes, and the response
        // ending ends the stream. Upstream is not half-closed after the body: some servers
        // treat that as an abort. A body cut short ends the exchange.
        let request = async {
            let mut from_box = tokio::io::BufReader::new(Replay::new(body_start, box_r));
            match copy_body(&mut from_box, &mut up_w, rewritten.framing).await {
                Ok(()) => std::future::pending::<io::Error>().await,
                Err(e) => io::Error::other(e),
            }
        };
        let response = relay_response(&mut up_r, &mut box_w, &self.secrets, rewritten.shape);
        let (encoded_response, stream_error) = tokio::select! {
            res = response => match res {
                Ok(relayed) => (relayed == Relayed::Encoded, None),
                Err(e) => (false, Some(e)),
            },
            e = request => (false, Some(e)),
        };
        Ok(Served {
            injected: rewritten.injected,
            withheld: rewritten.withheld,
            encoded_response,
            stream_error,
        })
    }
}

/// The gateway's own answer to the box; the box may already be gone.
async fn answer<S: AsyncWrite + Unpin>(s: &mut S, status: &str) {
    let response = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let _ = s.write_all(response.as_bytes()).await;
    let _ = s.shutdown().await;
}
