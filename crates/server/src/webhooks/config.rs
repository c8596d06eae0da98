//! `[webhooks]` of berth.toml: which endpoints besides public `https://` ones a tenant may
//! register, and how hard the daemon tries.
//!
//! ```toml
//! [webhooks]
//! # Exact origins (scheme://host[:port]) allowed besides public https:// URLs, http and
//! # private addresses included: internal receivers, tests. Each is a place the daemon POSTs to.
//! allow_endpoints = ["http://127.0.0.1:8099"]
//! max_in_flight_per_tenant = 4   # attempts under way at once, per tenant
//! timeout_s = 10                 # one attempt: connect, TLS, request, answer
//! first_retry_s = 5              # the wait after the first failure; it doubles, up to
//! max_retry_s = 3600             # this, until
//! retry_for_s = 86400            # a delivery this old is given up
//! ```

use serde::Deserialize;

/// `[webhooks]`, validated while parsing (a mistake names its line).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawWebhooksConfig")]
pub struct WebhooksHostConfig {
    /// Normalised origins: `scheme://host:port`, lower case, the port always written.
    pub allow_endpoints: Vec<String>,
    pub max_in_flight_per_tenant: usize,
    pub timeout_s: u64,
    pub first_retry_s: u64,
    pub max_retry_s: u64,
    pub retry_for_s: u64,
}

impl Default for WebhooksHostConfig {
    fn default() -> Self {
        WebhooksHostConfig {
            allow_endpoints: Vec::new(),
            max_in_flight_per_tenant: 4,
            timeout_s: 10,
            first_retry_s: 5,
            max_retry_s: 3600,
            retry_for_s: 86_400,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhooksConfig {
    #[serde(default)]
    allow_endpoints: Vec<String>,
    max_in_flight_per_tenant: Option<usize>,
    timeout_s: Option<u64>,
    first_retry_s: Option<u64>,
    max_retry_s: Option<u64>,
    retry_for_s: Option<u64>,
}

impl TryFrom<RawWebhooksConfig> for WebhooksHostConfig {
    type Error = String;

    fn try_from(raw: RawWebhooksConfig) -> Result<Self, String> {
        let d = WebhooksHostConfig::default();
        let config = WebhooksHostConfig {
            allow_endpoints: crate::outbound::allowed_origins(&raw.allow_endpoints, "webhooks")?,
            max_in_flight_per_tenant: raw
                .max_in_flight_per_tenant
                .unwrap_or(d.max_in_flight_per_tenant),
            timeout_s: raw.timeout_s.unwrap_or(d.timeout_s),
            first_retry_s: raw.first_retry_s.unwrap_or(d.first_retry_s),
            max_retry_s: raw.max_retry_s.unwrap_or(d.max_retry_s),
            retry_for_s: raw.retry_for_s.unwrap_or(d.retry_for_s),
        };
        if !(1..=64).contains(&config.max_in_flight_per_tenant) {
            return Err("[webhooks] max_in_flight_per_tenant must be 1 to 64".to_owned());
        }
        if !(1..=60).contains(&config.timeout_s) {
            return Err("[webhooks] timeout_s must be 1 to 60".to_owned());
        }
        if config.first_retry_s == 0 || config.max_retry_s < config.first_retry_s {
            return Err(
                "[webhooks] first_retry_s must be at least 1, and max_retry_s at least first_retry_s"
                    .to_owned(),
            );
        }
        if config.retry_for_s > 7 * 86_400 {
            return Err("[webhooks] retry_for_s is at most 604800 (a week)".to_owned());
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use crate::HostConfig;
    use std::path::Path;

    #[test]
    fn webhook_settings_are_read_and_checked() {
        let path = Path::new("berth.toml");
        let config = HostConfig::parse(
            path,
            "[webhooks]\nallow_endpoints = [\"http://127.0.0.1:8099/\"]\nfirst_retry_s = 1\nmax_retry_s = 2\n",
        )
        .unwrap();
        assert_eq!(config.webhooks.allow_endpoints, ["http://127.0.0.1:8099"]);
        assert_eq!(
            (config.webhooks.first_retry_s, config.webhooks.max_retry_s),
            (1, 2)
        );
        assert_eq!(config.webhooks.retry_for_s, 86_400);
        for bad in [
            "[webhooks]\nallow_endpoints = [\"http://127.0.0.1:8099/in\"]\n",
            "[webhooks]\nmax_in_flight_per_tenant = 0\n",
            "[webhooks]\nfirst_retry_s = 10\nmax_retry_s = 5\n",
            "[webhooks]\nretry = 1\n",
        ] {
            let err = HostConfig::parse(path, bad).unwrap_err();
            assert!(err.to_string().starts_with("berth.toml:"), "{bad}: {err}");
        }
    }
}
