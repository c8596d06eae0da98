//! The gateway end to end on loopback: a Unix socket stands in for the box's egress channel,
//! a plain TCP server on 127.0.0.1 for the upstream (reached through a resolve override), and
//! ClientHellos are built byte by byte. No DNS, no traffic beyond loopback.

#[path = "gateway/allowed.rs"]
mod allowed;
#[path = "gateway/audit.rs"]
mod audit;
#[path = "common/gateway.rs"]
mod fixture;
#[path = "gateway/handoff.rs"]
mod handoff;
#[path = "gateway/refused.rs"]
mod refused;
#[path = "gateway/resources.rs"]
mod resources;
#[path = "gateway/tls.rs"]
mod tls;
