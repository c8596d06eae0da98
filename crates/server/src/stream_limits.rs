//! How long the daemon waits on the client of a stream that keeps a box awake (a
//! terminal, an exec's NDJSON frames) before it counts the client as gone, so that a
//! client that stops reading, or stops answering, cannot keep the box awake for ever:
//! `[server] send_timeout_s` for every send to such a client, and `[terminals]` for what
//! a terminal's client must say. A desktop's VNC WebSocket (`api/desktop_vnc.rs`), which
//! keeps no box awake but holds one of the tenant's streams, is held to the same.
//!
//! ```toml
//! [terminals]
//! # A WebSocket ping to an attached terminal's client this often (browsers and WebSocket
//! # libraries answer it by themselves).
//! ping_every_s = 30
//! # A client heard nothing from (no pong, no input) this long is detached.
//! silent_limit_s = 90
//! ```

use std::time::Duration;

use serde::Deserialize;

/// `[terminals]` of berth.toml.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TerminalsHostConfig {
    #[serde(default = "default_ping_every_s")]
    pub ping_every_s: u64,
    #[serde(default = "default_silent_limit_s")]
    pub silent_limit_s: u64,
}

impl Default for TerminalsHostConfig {
    fn default() -> Self {
        TerminalsHostConfig {
            ping_every_s: default_ping_every_s(),
            silent_limit_s: default_silent_limit_s(),
        }
    }
}

fn default_ping_every_s() -> u64 {
    30
}

/// Three pings missed: a phone on a bad link gets through one of them.
fn default_silent_limit_s() -> u64 {
    90
}

impl TerminalsHostConfig {
    /// `(key, value, min, max)` of each limit, checked when berth.toml is read. A silence
    /// limit no longer than the ping interval would detach a client that answers every
    /// ping.
    pub(crate) fn limits(&self) -> [(&'static str, u64, u64, u64); 2] {
        [
            ("[terminals] ping_every_s", self.ping_every_s, 1, 3600),
            (
                "[terminals] silent_limit_s",
                self.silent_limit_s,
                self.ping_every_s.saturating_add(1),
                86_400,
            ),
        ]
    }
}

/// The limits in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamLimits {
    /// A send to the client that has not completed after this ends the stream (the client
    /// is not reading).
    pub send_timeout: Duration,
    /// How often a terminal's client is pinged.
    pub ping_every: Duration,
    /// A terminal's client heard nothing from this long is detached.
    pub silent_limit: Duration,
}

impl StreamLimits {
    /// From `[server] send_timeout_s` and `[terminals]`.
    pub fn new(send_timeout_s: u64, terminals: &TerminalsHostConfig) -> StreamLimits {
        StreamLimits {
            send_timeout: Duration::from_secs(send_timeout_s),
            ping_every: Duration::from_secs(terminals.ping_every_s),
            silent_limit: Duration::from_secs(terminals.silent_limit_s),
        }
    }
}
