//! One request forwarded as HTTP/1.1 over a stream to an in-box port.
//!
//! Bodies stream both ways through hyper's bounded buffers (a slow reader on either side
//! slows the writer on the other; nothing is held whole). Headers are forwarded end to end
//! per RFC 9110 §7.6.1: hop-by-hop ones, and every header the `Connection` header names,
//! stay on their hop. berth's own credentials never reach the app: an `Authorization`
//! that carries a berth API key and berth's cookie are taken out. `X-Forwarded-*` from the
//! client are replaced by berth's own. An `Upgrade` request (a WebSocket) is forwarded
//! with its `Upgrade`; when the app answers `101`, the two upgraded connections are
//! spliced until either side closes. An app's answer head must begin within the deadline
//! the caller gives (`[ports] answer_timeout_s`), and a `101` to a request that asked for
//! no upgrade is refused: either would leave the client waiting for ever.

use std::any::Any;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, StatusCode};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::ports::cookie;
use crate::ports::pool::{AppKey, AppPool};

/// What a path-mode answer's page may do: run its scripts, but in an opaque origin of its
/// own, never berth's (where it could call the API with the browser's session cookie).
pub const SANDBOX_CSP: &str =
    "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads";

/// Puts an app's answer served under berth's own origin (path mode) in the sandbox,
/// replacing whatever policy the app set (one the app chose could leave it out).
pub fn sandbox(headers: &mut HeaderMap) {
    headers.remove(header::CONTENT_SECURITY_POLICY);
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(SANDBOX_CSP),
    );
}

/// The most bytes of response head (status line and headers) taken from an app.
pub const MAX_RESPONSE_HEAD_BYTES: usize = 64 * 1024;

/// What the daemon keeps alive while a proxied exchange lasts (its connection slot, the
/// box's activity guard): dropped when the response body ends or the splice closes.
pub type Hold = Box<dyn Any + Send + Sync>;

/// Where the request goes, and what the app is told about where it came from.
#[derive(Debug, Clone)]
pub struct Forwarding {
    pub port: u16,
    /// The path (from `/`) and query sent to the app.
    pub path_and_query: String,
    /// `X-Forwarded-Prefix`: the path the app is mounted under (`None` at `/`).
    pub prefix: Option<String>,
    pub client: Option<IpAddr>,
    /// The client's request came over berth's own TLS (`X-Forwarded-Proto: https`).
    pub over_tls: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("invalid path for the app: {path:?}")]
    Path { path: String },
    #[error("the app on port {port} does not speak HTTP/1.1")]
    Handshake {
        port: u16,
        #[source]
        source: hyper::Error,
    },
    #[error("the app on port {port} closed the connection before the request was sent")]
    Closed { port: u16 },
    #[error("the app on port {port} gave no answer")]
    NoAnswer {
        port: u16,
        #[source]
        source: hyper::Error,
    },
    #[error("the app on port {port} began no answer within {waited_s}s ([ports] answer_timeout_s): make it answer sooner (a long job can answer at once and report later), or raise the limit")]
    AnswerTimeout { port: u16, waited_s: u64 },
    #[error("the app on port {port} answered 101 Switching Protocols to a request that asked for no upgrade")]
    UnaskedUpgrade { port: u16 },
}

/// A request made ready for the app: its head rewritten, the client's upgrade taken.
pub struct Prepared {
    upstream: http::Request<Body>,
    client_upgrade: Option<hyper::upgrade::OnUpgrade>,
}

impl Prepared {
    /// Whether the client asked to upgrade (such a connection is never reused).
    pub fn is_upgrade(&self) -> bool {
        self.client_upgrade.is_some()
    }
}

/// Where an exchange's connection goes once its answer has been read to the end.
pub type Reuse = (Arc<AppPool>, AppKey);

/// Why an exchange did not give an answer.
pub enum Failed {
    /// The (pooled) connection closed before the request went out: nothing was sent, so
    /// it is safe to send it on another connection.
    NotSent {
        prepared: Box<Prepared>,
        hold: Hold,
    },
    Proxy(ProxyError),
}

/// Rewrites the client's request for the app (`to`'s path, end-to-end headers only).
pub fn prepare(mut request: Request, to: &Forwarding) -> Result<Prepared, ProxyError> {
    let upgrade = upgrade_protocol(request.headers());
    // Taken now: hyper hands the client's connection over once the 101 is sent.
    let client_upgrade = upgrade.as_ref().map(|_| hyper::upgrade::on(&mut request));
    let (parts, body) = request.into_parts();
    let uri: http::Uri = to.path_and_query.parse().map_err(|_| ProxyError::Path {
        path: to.path_and_query.clone(),
    })?;
    let mut upstream = http::Request::new(body);
    *upstream.method_mut() = parts.method;
    *upstream.uri_mut() = uri;
    *upstream.headers_mut() = request_headers(&parts.headers, upgrade.as_ref(), to);
    Ok(Prepared {
        upstream,
        client_upgrade,
    })
}

/// HTTP/1.1 over a new stream to the app.
pub async fn handshake<S>(stream: S, port: u16) -> Result<SendRequest<Body>, ProxyError>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_RESPONSE_HEAD_BYTES)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(|source| ProxyError::Handshake { port, source })?;
    tokio::spawn(async move {
        // Ends when the connection is dropped (from the pool too), or with the splice,
        // which owns the connection then.
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "proxied connection ended");
        }
    });
    Ok(sender)
}

/// Sends the request on `sender` and passes the app's answer back, holding `hold` until
/// the answer's body ends (or the splice of an upgrade closes). The answer's head must
/// come within `answer_timeout` (its body may take as long as it streams). With `reuse`,
/// a connection whose answer was read to its end goes back to the pool.
pub async fn exchange(
    mut sender: SendRequest<Body>,
    prepared: Prepared,
    port: u16,
    answer_timeout: Duration,
    hold: Hold,
    reuse: Option<Reuse>,
) -> Result<Response, Failed> {
    if sender.ready().await.is_err() {
        return Err(Failed::NotSent {
            prepared: Box::new(prepared),
            hold,
        });
    }
    let Prepared {
        upstream,
        client_upgrade,
    } = prepared;
    // On the deadline the request is dropped with `sender`, which closes the connection.
    let answer = tokio::time::timeout(answer_timeout, sender.try_send_request(upstream)).await;
    let mut response = match answer {
        Err(_elapsed) => {
            return Err(Failed::Proxy(ProxyError::AnswerTimeout {
                port,
                waited_s: answer_timeout.as_secs(),
            }))
        }
        Ok(Ok(response)) => response,
        Ok(Err(mut e)) => {
            return match e.take_message() {
                Some(upstream) => Err(Failed::NotSent {
                    prepared: Box::new(Prepared {
                        upstream,
                        client_upgrade,
                    }),
                    hold,
                }),
                None => Err(Failed::Proxy(ProxyError::NoAnswer {
                    port,
                    source: e.into_error(),
                })),
            };
        }
    };
    let switching = response.status() == StatusCode::SWITCHING_PROTOCOLS;
    let headers = response_headers(response.headers(), switching);
    match (switching, client_upgrade) {
        (true, Some(client_upgrade)) => {
            let app_upgrade = hyper::upgrade::on(&mut response);
            tokio::spawn(splice(client_upgrade, app_upgrade, hold));
            let mut answer = Response::new(Body::empty());
            *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            *answer.headers_mut() = headers;
            return Ok(answer);
        }
        // Passed on, it would switch a client that expects HTTP to nothing: it waits for
        // ever. The app's connection, in an unknown protocol now, is dropped with it.
        (true, None) => return Err(Failed::Proxy(ProxyError::UnaskedUpgrade { port })),
        (false, _) => {}
    }
    let (mut parts, body) = response.into_parts();
    parts.headers = headers;
    let back = reuse.map(|(pool, key)| (pool, key, sender));
    Ok(Response::from_parts(
        parts,
        Body::new(Holding {
            inner: body,
            _hold: hold,
            back,
        }),
    ))
}

/// Copies both ways between the client's and the app's upgraded connections.
async fn splice(client: hyper::upgrade::OnUpgrade, app: hyper::upgrade::OnUpgrade, hold: Hold) {
    let (client, app) = match tokio::join!(client, app) {
        (Ok(client), Ok(app)) => (client, app),
        (client, app) => {
            tracing::debug!(
                client = client.is_ok(),
                app = app.is_ok(),
                "an upgrade failed"
            );
            return;
        }
    };
    let (mut client, mut app) = (TokioIo::new(client), TokioIo::new(app));
    // Fixed buffers each way: a side that stops reading stops the other's writes.
    let _ = tokio::io::copy_bidirectional(&mut client, &mut app).await;
    drop(hold);
}

/// The protocol an `Upgrade` request asks for (only with `Connection: upgrade`).
fn upgrade_protocol(headers: &HeaderMap) -> Option<HeaderValue> {
    connection_tokens(headers)
        .any(|t| t.eq_ignore_ascii_case("upgrade"))
        .then(|| headers.get(header::UPGRADE).cloned())
        .flatten()
}

/// Headers that belong to one hop (RFC 9110 §7.6.1), and the old `Proxy-Connection`.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The headers both directions drop: hop-by-hop ones and those `Connection` names.
fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let listed: Vec<HeaderName> = connection_tokens(headers)
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    let mut out = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        if !HOP_BY_HOP.contains(name) && !listed.contains(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

fn request_headers(
    incoming: &HeaderMap,
    upgrade: Option<&HeaderValue>,
    to: &Forwarding,
) -> HeaderMap {
    let mut out = end_to_end(incoming);
    if out
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(carries_berth_key)
    {
        out.remove(header::AUTHORIZATION);
    }
    out.remove(header::COOKIE);
    // An E2B sandbox's traffic token opened the port: the app never sees it.
    out.remove(crate::e2b::access_key::TRAFFIC_TOKEN_HEADER);
    if let Some(cookies) = cookie::without_ours(incoming) {
        out.insert(header::COOKIE, cookies);
    }
    for name in [
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-prefix",
    ] {
        out.remove(name);
    }
    if let Some(ip) = to.client {
        out.insert("x-forwarded-for", header_value(&ip.to_string()));
    }
    let proto = if to.over_tls { "https" } else { "http" };
    out.insert("x-forwarded-proto", HeaderValue::from_static(proto));
    if let Some(host) = incoming.get(header::HOST) {
        out.insert("x-forwarded-host", host.clone());
    }
    if let Some(prefix) = &to.prefix {
        out.insert("x-forwarded-prefix", header_value(prefix));
    }
    if let Some(protocol) = upgrade {
        out.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        out.insert(header::UPGRADE, protocol.clone());
    }
    out
}

/// `Bearer berth_…`: the caller's berth API key, which is berth's, not the app's.
fn carries_berth_key(authorization: &str) -> bool {
    authorization
        .strip_prefix("Bearer ")
        .is_some_and(|key| key.trim().starts_with("berth_"))
}

fn response_headers(incoming: &HeaderMap, switching: bool) -> HeaderMap {
    let mut out = end_to_end(incoming);
    if switching {
        out.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        if let Some(protocol) = incoming.get(header::UPGRADE) {
            out.insert(header::UPGRADE, protocol.clone());
        }
    }
    out
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// The app's response body, holding the exchange's slot and guard until it ends, and the
/// connection to give back to the pool if it was read to its end.
struct Holding {
    inner: Incoming,
    _hold: Hold,
    back: Option<(Arc<AppPool>, AppKey, SendRequest<Body>)>,
}

impl Drop for Holding {
    fn drop(&mut self) {
        // A body cut short leaves bytes on the connection: it is not reused.
        if self.inner.is_end_stream() {
            if let Some((pool, key, sender)) = self.back.take() {
                pool.give(key, sender);
            }
        }
    }
}

impl HttpBody for Holding {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to() -> Forwarding {
        Forwarding {
            port: 8000,
            path_and_query: "/x?y=1".into(),
            prefix: Some("/v1/boxes/a/ports/8000".into()),
            client: Some("10.0.0.7".parse().unwrap()),
            over_tls: false,
        }
    }

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        headers
    }

    #[test]
    fn hop_by_hop_and_berths_credentials_stay_behind() {
        let incoming = map(&[
            ("host", "berth.example"),
            ("connection", "keep-alive, X-Secret-Hop"),
            ("keep-alive", "timeout=5"),
            ("x-secret-hop", "1"),
            ("te", "trailers"),
            ("proxy-authorization", "Basic abc"),
            ("authorization", "Bearer berth_0123"),
            ("cookie", "berth_port=bps_1; app=2"),
            ("e2b-traffic-access-token", "ab12"),
            ("x-forwarded-for", "6.6.6.6"),
            ("accept", "text/plain"),
        ]);
        let out = request_headers(&incoming, None, &to());
        for gone in [
            "e2b-traffic-access-token",
            "connection",
            "keep-alive",
            "x-secret-hop",
            "te",
            "proxy-authorization",
            "authorization",
        ] {
            assert!(!out.contains_key(gone), "{gone} forwarded: {out:?}");
        }
        assert_eq!(out["cookie"], "app=2");
        assert_eq!(out["x-forwarded-for"], "10.0.0.7");
        assert_eq!(out["x-forwarded-host"], "berth.example");
        assert_eq!(out["x-forwarded-proto"], "http");
        assert_eq!(out["x-forwarded-prefix"], "/v1/boxes/a/ports/8000");
        let over_tls = Forwarding {
            over_tls: true,
            ..to()
        };
        let out = request_headers(&incoming, None, &over_tls);
        assert_eq!(out["x-forwarded-proto"], "https");
        assert_eq!(out["accept"], "text/plain");
        assert_eq!(out["host"], "berth.example");
    }

    #[test]
    fn an_apps_own_authorization_and_an_upgrade_go_through() {
        let incoming = map(&[
            ("authorization", "Basic dXNlcjpwdw=="),
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-key", "abc"),
        ]);
        let upgrade = upgrade_protocol(&incoming);
        assert_eq!(upgrade.as_ref().unwrap(), "websocket");
        let out = request_headers(&incoming, upgrade.as_ref(), &to());
        assert_eq!(out["authorization"], "Basic dXNlcjpwdw==");
        assert_eq!(out["connection"], "upgrade");
        assert_eq!(out["upgrade"], "websocket");
        assert_eq!(out["sec-websocket-key"], "abc");
        // Without `Connection: upgrade`, an `Upgrade` header is only a hop's.
        let no_conn = map(&[("upgrade", "websocket")]);
        assert_eq!(upgrade_protocol(&no_conn), None);
        assert!(!request_headers(&no_conn, None, &to()).contains_key("upgrade"));
    }

    #[test]
    fn responses_lose_hop_headers_but_a_101_keeps_its_upgrade() {
        let incoming = map(&[
            ("connection", "upgrade, x-hop"),
            ("upgrade", "websocket"),
            ("x-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("sec-websocket-accept", "zzz"),
        ]);
        let plain = response_headers(&incoming, false);
        assert!(!plain.contains_key("upgrade") && !plain.contains_key("x-hop"));
        assert!(!plain.contains_key("transfer-encoding"));
        let switching = response_headers(&incoming, true);
        assert_eq!(switching["upgrade"], "websocket");
        assert_eq!(switching["connection"], "upgrade");
        assert_eq!(switching["sec-websocket-accept"], "zzz");
    }
}
