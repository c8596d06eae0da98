//! How an API replica reaches nodes: mutual TLS that checks the node's name, HTTP/1.1 on
//! connections kept open between calls, the node's boot checked on every answer, and an
//! upgraded connection (a terminal's or a port's WebSocket) spliced through.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use berth_store::NodeRoute;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::cluster::mtls::ApiTls;
use crate::error::OpError;

/// How long a node has to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The header a node names its boot in, on every answer.
pub const BOOT_HEADER: &str = "berth-node-boot";

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
