//! In-box ports (protocol version 3). A box has no inbound network; the host reaches a
//! program listening inside on `127.0.0.1:<port>` through the agent:
//!
//! | call | method and path | response |
//! |---|---|---|
//! | [`crate::guest::Call::PortConnect`] | `GET /v1/ports/{port}`, `Upgrade: berth-tcp` | `101`, then the TCP connection's bytes both ways |
//!
//! `berth-init` connects first and answers `101` only once connected; nothing listening is
//! `503 unavailable` (the host may wait and ask again: a program still starting).

/// The `Upgrade` token of a port connection.
pub const PORT_UPGRADE: &str = "berth-tcp";
