//! `[server]` of berth.toml: what the public API server lets one client hold, and the
//! old name of its stream budget, still read.

use serde::Deserialize;

/// `[server]`: what the public API server lets one client hold.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(from = "ServerHostConfigFile")]
pub struct ServerHostConfig {
    /// Connections served at once; more wait in the listen backlog until one closes.
    pub max_connections: usize,
    /// A request's headers (and an idle keep-alive connection's next request) must arrive
    /// within this many seconds.
    pub header_timeout_s: u64,
    /// A request body that sends nothing for this many seconds is cut.
    pub body_idle_timeout_s: u64,
    /// Long-lived streams (process output, streaming execs, event streams, file watches,
    /// terminals, port connections) one tenant may hold open at once.
    pub max_streams_per_tenant: usize,
    /// Connections from one address (an IPv6 /64) on which no request has authenticated.
    pub max_anonymous_connections_per_address: usize,
    /// A new connection's first request headers (and its TLS handshake) must arrive
    /// within this many seconds (at most `header_timeout_s` takes effect).
    pub first_request_timeout_s: u64,
    /// The share of `max_connections` one tenant can never take: kept for the others.
    pub connections_kept_for_others_percent: u64,
    /// `max_event_streams_per_tenant` as berth.toml gave it: the old name of
    /// `max_streams_per_tenant` (when that is absent, this is its value), warned about.
    pub old_max_event_streams_per_tenant: Option<usize>,
    /// A send to the client of a stream that keeps a box awake (a terminal's output, an
    /// exec's frames) that has not completed after this many seconds ends the stream.
    pub send_timeout_s: u64,
}

/// `[server]` as written in berth.toml.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerHostConfigFile {
    max_connections: Option<usize>,
    header_timeout_s: Option<u64>,
    body_idle_timeout_s: Option<u64>,
    max_streams_per_tenant: Option<usize>,
    /// Before the budget covered every stream, it was event streams' only.
    max_event_streams_per_tenant: Option<usize>,
    max_anonymous_connections_per_address: Option<usize>,
    first_request_timeout_s: Option<u64>,
    connections_kept_for_others_percent: Option<u64>,
    send_timeout_s: Option<u64>,
}

impl From<ServerHostConfigFile> for ServerHostConfig {
    fn from(file: ServerHostConfigFile) -> Self {
        let defaults = ServerHostConfig::default();
        ServerHostConfig {
            max_connections: file.max_connections.unwrap_or(defaults.max_connections),
            header_timeout_s: file.header_timeout_s.unwrap_or(defaults.header_timeout_s),
            body_idle_timeout_s: file
                .body_idle_timeout_s
                .unwrap_or(defaults.body_idle_timeout_s),
            max_streams_per_tenant: file
                .max_streams_per_tenant
                .or(file.max_event_streams_per_tenant)
                .unwrap_or(defaults.max_streams_per_tenant),
            max_anonymous_connections_per_address: file
                .max_anonymous_connections_per_address
                .unwrap_or(defaults.max_anonymous_connections_per_address),
            first_request_timeout_s: file
                .first_request_timeout_s
                .unwrap_or(defaults.first_request_timeout_s),
            connections_kept_for_others_percent: file
                .connections_kept_for_others_percent
                .unwrap_or(defaults.connections_kept_for_others_percent),
            old_max_event_streams_per_tenant: file.max_event_streams_per_tenant,
            send_timeout_s: file.send_timeout_s.unwrap_or(defaults.send_timeout_s),
        }
    }
}

impl Default for ServerHostConfig {
    fn default() -> Self {
        ServerHostConfig {
            max_connections: 1024,
            header_timeout_s: 10,
            body_idle_timeout_s: 30,
            max_streams_per_tenant: 128,
            // A browser opens about 6 connections to a host, and a NAT (an office, a
            // carrier's) puts many clients behind one address; a connection leaves this
            // count at its first signed-in request. 64 lets ten browsers behind one address
            // open at the same instant, and holds one address to 1/16 of the default 1024.
            max_anonymous_connections_per_address: 64,
            // A TLS handshake and a request's headers over a slow mobile link take a second
            // or two; a client that says nothing for 5 s is gone or an attack.
            first_request_timeout_s: 5,
            connections_kept_for_others_percent: 25,
            old_max_event_streams_per_tenant: None,
            // As long as a terminal's client may stay silent: a client on a bad link that
            // reads again within it keeps its stream.
            send_timeout_s: 90,
        }
    }
}

impl ServerHostConfig {
    /// What berth.toml should say instead, for the start's log.
    pub(super) fn warnings(&self) -> Vec<String> {
        match self.old_max_event_streams_per_tenant {
            Some(old) => vec![format!(
                "[server] max_event_streams_per_tenant = {old} is the old name of \
                 max_streams_per_tenant, which counts every long-lived stream (not only event \
                 streams) and is {} now; rename the key (the old one is read only when the new \
                 one is absent)",
                self.max_streams_per_tenant
            )],
            None => Vec::new(),
        }
    }
}
