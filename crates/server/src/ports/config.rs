//! `[ports]` in berth.toml.
//!
//! ```toml
//! [ports]
//! # Requests for <port>-<box name>.<base_domain> reach that box's port at `/`. Never
//! # under berth's own registrable domain (`ports/shared_site.rs`).
//! base_domain = "boxes.example-apps.net"
//! # How long a request waits for a port to start listening (a box just woken).
//! listen_wait_s = 30
//! # How long the proxy waits for an app's answer head (status line and headers): 504 after.
//! answer_timeout_s = 60
//! # Proxied requests and WebSocket connections open at once.
//! max_connections_per_tenant = 64
//! max_connections = 512
//! ```

use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortsHostConfig {
    /// A DNS name under which each box's ports get a host name of their own. Lowercase.
    #[serde(default)]
    pub base_domain: Option<String>,
    /// A request to a port where nothing listens yet retries for this long (0: not at all).
    #[serde(default = "default_listen_wait_s")]
    pub listen_wait_s: u64,
    /// An app that has not begun its answer (status line and headers) this long after the
    /// request went out is answered `504` for it, and its connection closed.
    #[serde(default = "default_answer_timeout_s")]
    pub answer_timeout_s: u64,
    #[serde(default = "default_max_connections_per_tenant")]
    pub max_connections_per_tenant: usize,
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

impl Default for PortsHostConfig {
    fn default() -> Self {
        PortsHostConfig {
            base_domain: None,
            listen_wait_s: default_listen_wait_s(),
            answer_timeout_s: default_answer_timeout_s(),
            max_connections_per_tenant: default_max_connections_per_tenant(),
            max_connections: default_max_connections(),
        }
    }
}

fn default_listen_wait_s() -> u64 {
    30
}

/// nginx's `proxy_read_timeout`, the web's common default that long-polling apps are
/// written for; long enough for a dev server's first compile after a wake.
fn default_answer_timeout_s() -> u64 {
    60
}

fn default_max_connections_per_tenant() -> usize {
    64
}

fn default_max_connections() -> usize {
    512
}

impl PortsHostConfig {
    pub fn listen_wait(&self) -> Duration {
        Duration::from_secs(self.listen_wait_s)
    }

    pub fn answer_timeout(&self) -> Duration {
        Duration::from_secs(self.answer_timeout_s)
    }

    /// `(key, value, min, max)` of each bounded number, for the config's checks.
    pub(crate) fn limits(&self) -> [(&'static str, u64, u64, u64); 4] {
        [
            ("[ports] listen_wait_s", self.listen_wait_s, 0, 600),
            ("[ports] answer_timeout_s", self.answer_timeout_s, 1, 3600),
            (
                "[ports] max_connections_per_tenant",
                self.max_connections_per_tenant as u64,
                1,
                1 << 20,
            ),
            (
                "[ports] max_connections",
                self.max_connections as u64,
                1,
                1 << 20,
            ),
        ]
    }

    /// The rule `base_domain` breaks, if any: a lowercase DNS name of at least two
    /// labels (each a-z, 0-9, `-`, not starting or ending with `-`), at most 200 bytes,
    /// so that `<port>-<name>.` still fits a name's 253.
    pub(crate) fn base_domain_rule(&self) -> Option<&'static str> {
        let domain = self.base_domain.as_deref()?;
        if domain.len() > 200 {
            return Some("must be at most 200 characters");
        }
        let labels: Vec<&str> = domain.split('.').collect();
        if labels.len() < 2 {
            return Some("must have at least two labels, like boxes.example.com");
        }
        if labels
            .iter()
            .any(|l| crate::dns_label::label_rule(l).is_some())
        {
            return Some(
                "each label must be 1-63 of a-z, 0-9 and -, not starting or ending with -",
            );
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(domain: &str) -> Option<&'static str> {
        PortsHostConfig {
            base_domain: Some(domain.into()),
            ..Default::default()
        }
        .base_domain_rule()
    }

    #[test]
    fn base_domains_are_lowercase_dns_names() {
        assert_eq!(rule("boxes.example.com"), None);
        assert_eq!(rule("localhost.test"), None);
        for bad in [
            "com",
            "Boxes.example.com",
            "a..b",
            "-a.b",
            "a_b.c",
            "a.b.",
            "",
        ] {
            assert!(rule(bad).is_some(), "{bad:?}");
        }
        assert!(rule(&format!("{}.com", "a.".repeat(100))).is_some());
    }
}
