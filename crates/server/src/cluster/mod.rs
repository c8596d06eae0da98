//! Many hosts (issue 24, docs/cluster.md). Which part this daemon plays ([`role`]): a node
//! registers, renews its lease and does the ops queued for it ([`node_agent`], [`op`],
//! [`status`]); an API replica turns lifecycle verbs into ops ([`remote`]), forwards every
//! other call on a box to its node ([`forward`]), and runs the cluster's singleton jobs
//! under a lease ([`jobs`]), among them moving a lost node's boxes to others ([`failover`]).
//!
//! The cluster's trust: the API replicas hold a certificate authority
//! ([`ca`]); each `berth node` joins once with a one-time token and a certificate signing
//! request ([`join`]); from then on every call between an API replica and a node is over TLS
//! that both ends authenticate by that CA and by role ([`mtls`]): a node takes calls only
//! from API replicas, and a replica talks only to the node it meant.

pub mod ca;
pub mod error;
pub mod failover;
pub mod forward;
pub mod jobs;
pub mod jobs_term;
pub mod join;
pub mod mtls;
pub mod node_agent;
pub mod node_client;
pub mod op;
pub mod op_kind;
pub mod remote;
pub mod role;
pub mod status;

#[cfg(test)]
mod tests;
