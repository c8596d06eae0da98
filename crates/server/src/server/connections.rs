//! The API's connections, bounded so that slow or greedy clients cannot exhaust the
//! daemon: at most `max_connections` at once (more wait in the kernel's listen backlog,
//! which is bounded, until one closes), request headers and an idle keep-alive
//! connection's next request must arrive within `header_timeout` (a slowloris client is
//! cut), and a request body that sends nothing for `body_idle_timeout` while the daemon
//! waits for it is cut (a large upload that keeps flowing is fine). With TLS, the
//! handshake runs in the connection's own task under the same `header_timeout`, so a
//! client that connects and says nothing holds only its own slot.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tower_service::Service;

use crate::host_config::ServerHostConfig;
use crate::tls::{ServedOverTls, ALPN_ACME_TLS};

/// A failed accept (out of file descriptors, say) is retried after this pause.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_idle_timeout: Duration,
}

impl From<&ServerHostConfig> for Limits {
    fn from(config: &ServerHostConfig) -> Self {
        Limits {
            max_connections: config.max_connections,
            header_timeout: Duration::from_secs(config.header_timeout_s),
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
        match accepted {
            Ok((stream, _)) => {
                tokio::spawn(serve_one(
                    stream,
                    app.clone(),
                    limits,
                    tls.clone(),
                    slot,
                    stopping.clone(),
                ));
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot accept a connection");
                tokio::time::sleep(ACCEPT_RETRY).await;
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

/// One connection, holding its slot until it closes.
async fn serve_one(
    stream: TcpStream,
    app: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
    _slot: OwnedSemaphorePermit,
    mut stopping: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    // The client's address, for `X-Forwarded-For` of the ports proxy.
    let peer = stream.peer_addr().ok().map(axum::extract::ConnectInfo);
    let Some(acceptor) = tls else {
        return serve_http(stream, app, limits, peer, false, stopping).await;
    };
    let handshake = tokio::time::timeout(limits.header_timeout, acceptor.accept(stream));
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
    serve_http(stream, app, limits, peer, true, stopping).await
}

/// HTTP/1.1 (with upgrades) on one connection until it closes or the daemon stops.
async fn serve_http<S>(
    stream: S,
    app: Router,
    limits: Limits,
    peer: Option<axum::extract::ConnectInfo<std::net::SocketAddr>>,
    over_tls: bool,
    mut stopping: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let idle = limits.body_idle_timeout;
    let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
        let mut req = req.map(|body| Body::new(IdleTimeoutBody::new(body, idle)));
        if let Some(peer) = peer {
            req.extensions_mut().insert(peer);
        }
        if over_tls {
            req.extensions_mut().insert(ServedOverTls);
        }
        app.clone().call(req)
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    let mut conn = std::pin::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = stopped(&mut stopping) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        // A client that went away or was cut (header timeout): not the daemon's failure.
        tracing::debug!(error = %e, "connection ended");
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
