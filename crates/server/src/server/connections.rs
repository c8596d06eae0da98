//! The API's connections, bounded so that slow or greedy clients cannot exhaust the
//! daemon. At most `max_connections` at once (more wait in the kernel's listen backlog,
//! which is bounded, until one closes); within them, what one client may hold
//! ([`crate::admission::connection`]): a connection from an address that already holds its
//! share of connections without a key is answered `429` at once and closed, unread (over
//! TLS it is closed without a handshake), and a tenant's over its share is answered `429`
//! and closed after the request that would have charged it.
//!
//! Deadlines: a new connection's TLS handshake and first request headers must arrive
//! within `first_request_timeout` (a client that connects and says nothing holds its slot
//! that long); later requests' headers, and an idle keep-alive connection's next request,
//! within `header_timeout` (hyper's `header_read_timeout`, which runs from when the
//! connection waits for a request head and is reset at each one, so it also cuts an idle
//! keep-alive connection, but cannot tell a first request from a later one); a request
//! body that sends nothing for `body_idle_timeout` while the daemon waits for it is cut (a
//! large upload that keeps flowing is fine). A connection that upgrades (a WebSocket)
//! leaves these counts when hyper hands it over; it holds one of its tenant's streams.

use std::convert::Infallible;
use std::future::Future;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use axum::Router;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_rustls::TlsAcceptor;
use tower_service::Service;

use crate::admission::connection::{Admitted, Connections};
use crate::api::error::ApiError;
use crate::error::OpError;
use crate::host_config::ServerHostConfig;
use crate::tls::{ServedOverTls, ALPN_ACME_TLS};

/// A failed accept (out of file descriptors, say) is retried after this pause.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub first_request_timeout: Duration,
    pub body_idle_timeout: Duration,
}

impl From<&ServerHostConfig> for Limits {
    fn from(config: &ServerHostConfig) -> Self {
        let header_timeout = Duration::from_secs(config.header_timeout_s);
        Limits {
            max_connections: config.max_connections,
            header_timeout,
            // hyper's header timer cuts a first request at `header_timeout` anyway.
            first_request_timeout: Duration::from_secs(config.first_request_timeout_s)
                .min(header_timeout),
            body_idle_timeout: Duration::from_secs(config.body_idle_timeout_s),
        }
    }
}

/// Serves `app` on `listener` until `stopping` turns true, then stops accepting, lets each
/// connection finish its request in flight, and returns when every connection is closed.
pub(super) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    admission: Connections,
    tls: Option<TlsAcceptor>,
    mut stopping: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        // A slot first: over the cap, connections wait in the listen backlog.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = stopped(&mut stopping) => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stopped(&mut stopping) => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        // Admitted here, in accept order: the address's count is right for the next one.
        match admission.admit(peer.ip()) {
            Ok(admitted) => {
                let connection = Connection {
                    app: app.clone(),
                    limits,
                    peer,
                    admitted,
                    first_request_by: Instant::now() + limits.first_request_timeout,
                };
                tokio::spawn(connection.serve(stream, tls.clone(), slot, stopping.clone()));
            }
            Err(busy) => {
                drop(slot);
                tracing::debug!(%peer, error = %busy, "connection refused");
                if tls.is_none() {
                    refuse(stream, &refusal(busy).await);
                }
            }
        }
    }
    drop(listener);
    // Each connection gives its slot back when it ends: all back means all closed.
    let _all = slots.acquire_many(limits.max_connections as u32).await;
}

/// Resolves once `stopping` is true (or its sender is gone).
async fn stopped(stopping: &mut watch::Receiver<bool>) {
    let _ = stopping.wait_for(|s| *s).await;
}

/// The whole answer to a connection refused at once: the error as every answer has it,
/// with `Connection: close`.
async fn refusal(busy: OpError) -> Bytes {
    let (parts, body) = ApiError::Op(busy).into_response().into_parts();
    // The error body is a few hundred bytes, already in memory.
    let body = axum::body::to_bytes(body, 64 * 1024)
        .await
        .unwrap_or_default();
    let mut answer = format!("HTTP/1.1 {}\r\n", parts.status);
    for (name, value) in &parts.headers {
        if let Ok(value) = value.to_str() {
            answer.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    answer.push_str(&format!(
        "connection: close\r\ncontent-length: {}\r\n\r\n",
        body.len()
    ));
    let mut answer = answer.into_bytes();
    answer.extend_from_slice(&body);
    answer.into()
}

/// Writes `answer` and closes, never waiting: a flood of refused connections holds nothing.
fn refuse(stream: TcpStream, answer: &[u8]) {
    let Ok(mut stream) = stream.into_std() else {
        return;
    };
    // A fresh socket's send buffer takes the short answer whole (the socket is nonblocking).
    let _ = stream.write(answer);
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // What the client already sent is read and dropped: closing with unread bytes would
    // reset the connection, and the reset can overtake the answer.
    let _ = stream.read(&mut [0u8; 4096]);
}

/// One admitted connection.
struct Connection {
    app: Router,
    limits: Limits,
    /// The client's address, for `X-Forwarded-For` of the ports proxy.
    peer: SocketAddr,
    admitted: Admitted,
    /// The TLS handshake and the first request's headers are done by then, or it is cut.
    first_request_by: Instant,
}

impl Connection {
    /// Serves the connection, holding its slot (and its charge) until it closes.
    async fn serve(
        self,
        stream: TcpStream,
        tls: Option<TlsAcceptor>,
        _slot: OwnedSemaphorePermit,
        mut stopping: watch::Receiver<bool>,
    ) {
        let _ = stream.set_nodelay(true);
        let Some(acceptor) = tls else {
            return self.serve_http(stream, false, stopping).await;
        };
        let handshake = tokio::time::timeout_at(self.first_request_by, acceptor.accept(stream));
        let accepted = tokio::select! {
            accepted = handshake => accepted,
            // No request is in flight yet: a shutdown need not wait for this client.
            () = stopped(&mut stopping) => return,
        };
        let stream = match accepted {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                // Plain HTTP on the TLS port, an untrusted certificate, a scanner: the client's.
                tracing::debug!(error = %e, "TLS handshake failed");
                return;
            }
            Err(_elapsed) => {
                tracing::debug!("TLS handshake timed out");
                return;
            }
        };
        if stream.get_ref().1.alpn_protocol() == Some(ALPN_ACME_TLS) {
            // An ACME validation: the handshake was the whole exchange (RFC 8737).
            return;
        }
        self.serve_http(stream, true, stopping).await
    }

    /// HTTP/1.1 (with upgrades) on one connection until it closes or the daemon stops.
    async fn serve_http<S>(self, stream: S, over_tls: bool, mut stopping: watch::Receiver<bool>)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Connection {
            app,
            limits,
            peer,
            admitted,
            first_request_by,
        } = self;
        let requested = Arc::new(AtomicBool::new(false));
        let service = {
            let (requested, admitted) = (requested.clone(), admitted.clone());
            let idle = limits.body_idle_timeout;
            hyper::service::service_fn(move |req: http::Request<Incoming>| {
                // Called once the request's head is read.
                requested.store(true, Ordering::Release);
                let mut req = req.map(|body| Body::new(IdleTimeoutBody::new(body, idle)));
                let extensions = req.extensions_mut();
                extensions.insert(axum::extract::ConnectInfo(peer));
                extensions.insert(admitted.handle());
                if over_tls {
                    extensions.insert(ServedOverTls);
                }
                let answer = app.clone().call(req);
                let admitted = admitted.clone();
                async move {
                    let Ok(mut response) = answer.await;
                    if admitted.closing() {
                        // Over its tenant's share: hyper closes the connection after this.
                        response.headers_mut().insert(
                            http::header::CONNECTION,
                            http::HeaderValue::from_static("close"),
                        );
                    }
                    Ok::<_, Infallible>(response)
                }
            })
        };
        let conn = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let mut conn = std::pin::pin!(conn);
        let first_request = tokio::time::sleep_until(first_request_by);
        let mut first_request = std::pin::pin!(first_request);
        let mut waiting_for_first = true;
        let ended = loop {
            tokio::select! {
                ended = conn.as_mut() => break ended,
                () = first_request.as_mut(), if waiting_for_first => {
                    if !requested.load(Ordering::Acquire) {
                        tracing::debug!(%peer, "no request within the first request's deadline");
                        return;
                    }
                    waiting_for_first = false;
                }
                () = stopped(&mut stopping) => {
                    conn.as_mut().graceful_shutdown();
                    break conn.await;
                }
            }
        };
        if let Err(e) = ended {
            // A client that went away or was cut (header timeout): not the daemon's failure.
            tracing::debug!(error = %e, "connection ended");
        }
    }
}

/// Why a request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyReadError {
    #[error("the client sent nothing of the request body for {}s", idle.as_secs())]
    Idle { idle: Duration },
    #[error("cannot read the request body")]
    Read(#[source] hyper::Error),
}

/// A request body that fails once the daemon has waited `idle` for its next bytes.
struct IdleTimeoutBody {
    inner: Incoming,
    idle: Duration,
    /// Running while the daemon waits for bytes; reset by each frame.
    waiting: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl IdleTimeoutBody {
    fn new(inner: Incoming, idle: Duration) -> IdleTimeoutBody {
        IdleTimeoutBody {
            inner,
            idle,
            waiting: None,
        }
    }
}

impl hyper::body::Body for IdleTimeoutBody {
    type Data = Bytes;
    type Error = BodyReadError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyReadError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = None;
                Poll::Ready(frame.map(|f| f.map_err(BodyReadError::Read)))
            }
            Poll::Pending => {
                let idle = this.idle;
                let waiting = this
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
                match waiting.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(BodyReadError::Idle { idle }))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
