//! In-box ports (protocol version 3). A box has no inbound network; the host reaches a
//! program listening inside on `127.0.0.1:<port>` through the agent:
//!
//! | call | method and path | response |
//! |---|---|---|
//! | [`crate::guest::Call::PortConnect`] | `GET /v1/ports/{port}`, `Upgrade: berth-tcp` | `101`, then the TCP connection's bytes both ways |
//! | the same call, handed over | `POST /v1/ports/{port}/handoff` | the TCP socket itself ([`PORT_HANDOFF`]) |
//!
//! `berth-init` connects first and answers `101` only once connected; nothing listening is
//! `503 unavailable` (the host may wait and ask again: a program still starting).
//!
//! In a sandbox the agent shares the host's kernel, so rather than copy a connection's
//! bytes it can hand the connected socket over the channel's Unix socket (`SCM_RIGHTS`,
//! crate `berth-handoff`): the first thing the host reads on that connection is then the
//! socket, and the host speaks to the program directly. Any other answer is an HTTP error
//! answer as above (`503` when nothing listens). A channel that carries no descriptors (a
//! VM's) answers `400`, and an agent from before the handoff `404` (it routes only `GET`
//! under `/v1/ports/`), both before dialling anything: the host then uses the upgrade. The
//! handoff has no protocol version of its own; that `404` is how the host tells.

/// The `Upgrade` token of a port connection.
pub const PORT_UPGRADE: &str = "berth-tcp";

/// The last segment of a port handoff's path: `POST /v1/ports/{port}/handoff`.
pub const PORT_HANDOFF: &str = "handoff";
