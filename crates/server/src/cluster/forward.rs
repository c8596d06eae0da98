//! An API replica's routing: a call on a box (exec, files, terminals, processes, ports,
//! events, envd) goes to the box's node, over mutually authenticated TLS, as the client
//! sent it. The node answers it with the same API a single host has, checking the
//! client's key or session against the shared database itself, so a replica adds no trust
//! of its own: it only knows where the box lives. Clients never name a node.
//!
//! What a replica answers itself: everything not on one box, and on a box its row (`GET`),
//! the lifecycle verbs (ops, `cluster::remote`), messages and wakeups (rows in the
//! database, which stays the one place exactly-once is decided).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use berth_store::NodeRoute;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::cluster::mtls::ApiTls;
use crate::ctx::Ctx;
use crate::error::OpError;
use crate::ports::host::{match_host, HostMatch};

/// How long a node has to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The sub-resources of `/v1/boxes/{ref}/` a replica serves itself.
const LOCAL: &[&str] = &[
    "start", "stop", "pause", "resume", "snapshot", "messages", "wakeups",
];

/// How a replica reaches nodes: its own certificate, the cluster CA to check theirs, and
/// the connections it keeps open to them.
pub struct NodeClients {
    tls: Arc<ApiTls>,
    idle: Arc<IdleConnections>,
}

/// Idle connections to nodes, by node and boot (a connection to an earlier boot of a node
/// is never reused). A connection goes back once its answer was read to the end: a TLS
/// handshake per call would cost more than the call.
#[derive(Default)]
struct IdleConnections(Mutex<HashMap<NodeBoot, Vec<SendRequest<Body>>>>);

/// A node's id and boot id.
type NodeBoot = (String, String);

/// Idle connections kept per node.
const IDLE_PER_NODE: usize = 32;

impl IdleConnections {
    fn take(&self, key: &NodeBoot) -> Option<SendRequest<Body>> {
        let mut idle = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let senders = idle.get_mut(key)?;
        while let Some(sender) = senders.pop() {
            if !sender.is_closed() {
                return Some(sender);
            }
        }
        None
    }

    fn give(&self, key: NodeBoot, sender: SendRequest<Body>) {
        let mut idle = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let senders = idle.entry(key).or_default();
        senders.retain(|s| !s.is_closed());
        if senders.len() < IDLE_PER_NODE {
            senders.push(sender);
        }
    }
}

impl NodeClients {
    pub fn new(tls: Arc<ApiTls>) -> NodeClients {
        NodeClients {
            tls,
            idle: Default::default(),
        }
    }

    /// The replica's TLS, and with it the cluster CA.
    pub fn tls(&self) -> Arc<ApiTls> {
        self.tls.clone()
    }

    /// Sends `request` to `node` and returns its answer, streaming; an upgrade (a terminal's
    /// or a port's WebSocket) is spliced through once the node agrees to it.
    pub async fn send(&self, node: &NodeRoute, mut request: Request) -> Result<Response, OpError> {
        let unavailable = |reason: String| OpError::NodeUnavailable {
            node: node.name.clone(),
            reason,
        };
        let key = (node.id.clone(), node.boot_id.clone());
        let client_upgrade = is_upgrade(&request).then(|| hyper::upgrade::on(&mut request));
        // An upgraded connection is the client's until it closes: never a pooled one.
        let pooled = match client_upgrade {
            Some(_) => None,
            None => self.idle.take(&key),
        };
        let reused = pooled.is_some();
        let mut sender = match pooled {
            Some(sender) => sender,
            None => self.dial(node).await?,
        };
        if sender.ready().await.is_err() {
            sender = self.dial(node).await?;
        }
        let mut answer = match sender.try_send_request(request).await {
            Ok(answer) => answer,
            Err(mut e) => match e.take_message() {
                // A kept connection the node had closed: nothing was sent, so send it anew.
                Some(request) if reused => {
                    sender = self.dial(node).await?;
                    sender
                        .send_request(request)
                        .await
                        .map_err(|e| unavailable(format!("{} did not answer: {e}", node.address)))?
                }
                _ => {
                    return Err(unavailable(format!(
                        "{} did not answer: {}",
                        node.address,
                        e.into_error()
                    )))
                }
            },
        };
        // The certificate proved the node's name; its boot must be the one its row names
        // (an old process of it still answering on the address is not the node).
        let boot = answer
            .headers()
            .get(BOOT_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if boot != node.boot_id {
            return Err(unavailable(format!(
                "{} answered as boot {boot:?}, but its row names boot {}",
                node.address, node.boot_id
            )));
        }
        answer.headers_mut().remove(BOOT_HEADER);
        if answer.status() == http::StatusCode::SWITCHING_PROTOCOLS {
            if let Some(client) = client_upgrade {
                let node_side = hyper::upgrade::on(&mut answer);
                tokio::spawn(splice(client, node_side));
            }
            return Ok(answer.map(Body::new));
        }
        let back = client_upgrade
            .is_none()
            .then(|| (self.idle.clone(), key, sender));
        Ok(answer.map(|body| Body::new(GiveBackAtEnd { body, back })))
    }

    /// A new connection to `node`: TCP, mutual TLS that checks the node's name, HTTP/1.1.
    async fn dial(&self, node: &NodeRoute) -> Result<SendRequest<Body>, OpError> {
        let unavailable = |reason: String| OpError::NodeUnavailable {
            node: node.name.clone(),
            reason,
        };
        let config = self
            .tls
            .for_node(&node.name)
            .map_err(|e| unavailable(berth_runtime::error_chain(&e)))?;
        let tcp = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(&node.address))
            .await
            .map_err(|_| {
                unavailable(format!(
                    "{} did not accept within {CONNECT_TIMEOUT:?}",
                    node.address
                ))
            })?
            .map_err(|e| unavailable(format!("cannot connect to {}: {e}", node.address)))?;
        let _ = tcp.set_nodelay(true);
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(crate::cluster::mtls::node_server_name(), tcp)
            .await
            .map_err(|e| unavailable(format!("TLS with {} failed: {e}", node.address)))?;
        let (sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(tls))
            .await
            .map_err(|e| unavailable(format!("HTTP with {} failed: {e}", node.address)))?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "connection to a node ended");
            }
        });
        Ok(sender)
    }
}

/// A node's answer body that gives its connection back to the idle ones once read to the
/// end (dropped before that, the connection closes with it).
struct GiveBackAtEnd {
    body: hyper::body::Incoming,
    back: Option<(Arc<IdleConnections>, NodeBoot, SendRequest<Body>)>,
}

impl hyper::body::Body for GiveBackAtEnd {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(None) = polled {
            if let Some((idle, key, sender)) = self.back.take() {
                idle.give(key, sender);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

fn is_upgrade(request: &Request) -> bool {
    request.headers().contains_key(http::header::UPGRADE)
}

/// Copies bytes both ways between the client and the node once both sides upgraded.
async fn splice(client: hyper::upgrade::OnUpgrade, node: hyper::upgrade::OnUpgrade) {
    let (client, node) = match tokio::try_join!(client, node) {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!(error = %e, "an upgrade through a node did not complete");
            return;
        }
    };
    let (mut client, mut node) = (TokioIo::new(client), TokioIo::new(node));
    if let Err(e) = tokio::io::copy_bidirectional(&mut client, &mut node).await {
        tracing::debug!(error = %e, "an upgraded connection through a node ended");
    }
}

/// The header a node names its boot in, on every answer.
pub const BOOT_HEADER: &str = "berth-node-boot";

/// Middleware of a node: stamps every answer with this boot's id.
pub async fn stamp_boot(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if let Some(node) = ctx.role.node() {
        if let Ok(value) = http::HeaderValue::from_str(&node.boot_id) {
            response.headers_mut().insert(BOOT_HEADER, value);
        }
    }
    response
}

/// Middleware of an API replica: forwards a call on a box to its node, and lets
/// everything else through to this replica's own routes.
pub async fn route(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    let Some(api) = ctx.role.api() else {
        return next.run(request).await;
    };
    let (mut parts, body) = request.into_parts();
    let node = match node_for(&ctx, &mut parts).await {
        Ok(Some(node)) => node,
        Ok(None) => return next.run(Request::from_parts(parts, body)).await,
        Err(e) => return e.into_response(),
    };
    match api
        .nodes
        .send(&node, Request::from_parts(parts, body))
        .await
    {
        Ok(answer) => answer,
        Err(e) => ApiError::Op(e).into_response(),
    }
}

/// Middleware of an API replica, before the port host names are served: a request at a
/// box's port host name (`<port>-<box>.<base_domain>`) or at an E2B sandbox's envd host
/// name goes to the box's node.
pub async fn route_host(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    let Some(api) = ctx.role.api() else {
        return next.run(request).await;
    };
    let host = request
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let HostMatch::Port(port_host) = match_host(host, ctx.ports.base_domain.as_deref()) else {
        return next.run(request).await;
    };
    let record = if crate::api::ports::is_envd(&ctx, &port_host) {
        ctx.store
            .e2b_sandbox_on_host(&port_host.box_name)
            .ok()
            .flatten()
            .and_then(|sandbox| ctx.store.get_box(&sandbox.box_id).ok().flatten())
    } else {
        crate::api::ports::host_box(&ctx, &port_host, &request)
    };
    let Some(node_id) = record.and_then(|record| record.node_id) else {
        return next.run(request).await;
    };
    match reachable(&ctx, &node_id) {
        Ok(node) => match api.nodes.send(&node, request).await {
            Ok(answer) => answer,
            Err(e) => ApiError::Op(e).into_response(),
        },
        Err(e) => e.into_response(),
    }
}

/// The node a request must go to; `None`: this replica answers it (a 401 included).
async fn node_for(
    ctx: &Ctx,
    parts: &mut http::request::Parts,
) -> Result<Option<NodeRoute>, ApiError> {
    let node_id = if let Some(sandbox) = crate::e2b::envd::caller::sandbox_id(parts) {
        // envd's calls prove themselves with the sandbox's token, on the node.
        let Some(sandbox) = ctx
            .store
            .e2b_sandbox_on_host(&sandbox)
            .map_err(OpError::from)?
        else {
            return Ok(None);
        };
        ctx.store
            .get_box(&sandbox.box_id)
            .map_err(OpError::from)?
            .and_then(|record| record.node_id)
    } else {
        let Some(reference) = forwarded_box(&parts.method, parts.uri.path()).map(percent_decode)
        else {
            return Ok(None);
        };
        let Ok(Caller(principal)) = Caller::from_request_parts(parts, ctx).await else {
            return Ok(None);
        };
        match crate::ops::box_find::find_box(ctx, &principal.tenant_id, &reference) {
            Ok(record) => record.node_id,
            Err(OpError::BoxNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
    };
    match node_id {
        Some(node_id) => reachable(ctx, &node_id).map(Some),
        None => Ok(None),
    }
}

/// Node `node_id`'s route, while its lease runs.
fn reachable(ctx: &Ctx, node_id: &str) -> Result<NodeRoute, ApiError> {
    let node = ctx
        .store
        .node_route(node_id)
        .map_err(OpError::from)?
        .ok_or_else(|| OpError::NodeUnavailable {
            node: node_id.to_owned(),
            reason: "it is not registered".into(),
        })?;
    if !node.live() {
        return Err(OpError::NodeUnavailable {
            reason: format!("its lease ran out {} ms ago", node.lapsed_ms),
            node: node.name,
        }
        .into());
    }
    Ok(node)
}

/// The box reference of a call its node must answer: `/v1/boxes/{ref}/<sub>…` where
/// `<sub>` is not one of [`LOCAL`], or `PATCH /v1/boxes/{ref}` (a change may reach the
/// running box).
fn forwarded_box<'a>(method: &http::Method, path: &'a str) -> Option<&'a str> {
    let rest = path.strip_prefix("/v1/boxes/")?;
    match rest.split_once('/') {
        Some((reference, sub)) => {
            let first = sub.split('/').next().unwrap_or("");
            (!reference.is_empty() && !LOCAL.contains(&first)).then_some(reference)
        }
        None => (method == http::Method::PATCH && !rest.is_empty()).then_some(rest),
    }
}

/// Box names are DNS labels and ids `bx_` and hex: neither needs escaping, but a client
/// may still escape any byte.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_on_a_box_go_to_its_node_and_the_rest_stay() {
        let get = http::Method::GET;
        for (path, to_node) in [
            ("/v1/boxes/alice/exec", Some("alice")),
            ("/v1/boxes/alice/files", Some("alice")),
            ("/v1/boxes/alice/pty", Some("alice")),
            ("/v1/boxes/alice/events", Some("alice")),
            ("/v1/boxes/alice/ports/8000/x", Some("alice")),
            ("/v1/boxes/alice/messages", None),
            ("/v1/boxes/alice/start", None),
            ("/v1/boxes/alice/wakeups/w1", None),
            ("/v1/boxes/alice", None),
            ("/v1/boxes", None),
            ("/v1/boxes/", None),
            ("/v1/templates", None),
        ] {
            assert_eq!(forwarded_box(&get, path), to_node, "{path}");
        }
        assert_eq!(
            forwarded_box(&http::Method::PATCH, "/v1/boxes/alice"),
            Some("alice")
        );
        assert_eq!(percent_decode("al%69ce"), "alice");
        assert_eq!(percent_decode("100%"), "100%");
    }
}
