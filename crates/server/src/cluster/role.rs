//! Which part of a cluster this daemon is, and what that part holds.
//!
//! One binary, three roles. `berth up` alone is [`Role::Single`]: every box is its own.
//! `berth node` is [`Role::Node`]: the boxes placed on it are its own (it reconciles,
//! reclaims and stops only those), and lifecycle work reaches it as ops. `berth up --role
//! api` is [`Role::Api`]: it owns no box; lifecycle verbs become ops for the box's node
//! and every other call on a box is forwarded there over mutually authenticated TLS.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::cluster::mtls::ApiTls;
use crate::cluster::node_client::NodeClients;

/// How often a node renews its lease.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// How long a lease runs unrenewed: a node (or a job's holder) silent this long is gone.
pub const LEASE_TTL: Duration = Duration::from_secs(10);

/// How a node names itself to the cluster (`berth node` flags).
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// Unique in the cluster; the machine's host name by default.
    pub name: String,
    /// `host:port` where API replicas reach this node.
    pub advertise: String,
    pub labels: BTreeMap<String, String>,
}

/// The role the daemon is started in (`berth up`, `berth node`, `berth up --role api`).
#[derive(Clone, Default)]
pub enum RoleConfig {
    #[default]
    Single,
    Node {
        node: NodeConfig,
        /// The listener's TLS: this node's certificate, and API replicas' required.
        tls: Arc<rustls::ServerConfig>,
        /// A plain-HTTP address answering only `/v1/health` (for an orchestrator's probe).
        status_listen: Option<SocketAddr>,
    },
    /// The replica's certificate names it (`ApiTls::replica`).
    Api { tls: Arc<ApiTls> },
}

impl std::fmt::Debug for RoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RoleConfig::Single => f.write_str("Single"),
            RoleConfig::Node {
                node,
                status_listen,
                ..
            } => f
                .debug_struct("Node")
                .field("node", node)
                .field("status_listen", status_listen)
                .finish_non_exhaustive(),
            RoleConfig::Api { tls } => f
                .debug_struct("Api")
                .field("replica", &tls.replica())
                .finish_non_exhaustive(),
        }
    }
}

pub enum Role {
    Single,
    Node(NodeSelf),
    Api(ApiSide),
}

/// A node's view of itself.
pub struct NodeSelf {
    pub id: String,
    pub name: String,
    pub boot_id: String,
    /// Set while the node cannot renew its lease: it claims no ops until it can again.
    fenced: AtomicBool,
}

impl NodeSelf {
    pub fn new(id: String, name: String, boot_id: String) -> NodeSelf {
        NodeSelf {
            id,
            name,
            boot_id,
            fenced: AtomicBool::new(false),
        }
    }

    pub fn fenced(&self) -> bool {
        self.fenced.load(Ordering::SeqCst)
    }

    /// Records whether the lease is lost; `true` when that changed.
    pub fn set_fenced(&self, fenced: bool) -> bool {
        self.fenced.swap(fenced, Ordering::SeqCst) != fenced
    }
}

/// An API replica's means of reaching nodes.
pub struct ApiSide {
    pub nodes: NodeClients,
}

impl Role {
    /// Whose boxes this daemon runs: `Some(node id)` on a node, `None` (the boxes on no
    /// node) on a single host. An API replica runs none, and never asks.
    pub fn node_scope(&self) -> Option<&str> {
        match self {
            Role::Node(node) => Some(&node.id),
            Role::Single | Role::Api(_) => None,
        }
    }

    pub fn api(&self) -> Option<&ApiSide> {
        match self {
            Role::Api(api) => Some(api),
            _ => None,
        }
    }

    pub fn node(&self) -> Option<&NodeSelf> {
        match self {
            Role::Node(node) => Some(node),
            _ => None,
        }
    }
}
