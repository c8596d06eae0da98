//! `[push]` of berth.toml: who the daemon says it is to push services, and which endpoints
//! besides the known push services a browser may subscribe (tests, a self-hosted service).
//!
//! ```toml
//! [push]
//! # RFC 8292 `sub`: a mailto: or https: URL a push service can reach the operator at.
//! subject = "mailto:ops@example.com"
//! # Exact origins (scheme://host[:port]) that are allowed as endpoints besides the known
//! # push services, http included. Each one is a place the daemon will POST to.
//! allow_endpoints = ["http://127.0.0.1:8099"]
//! ```

use serde::Deserialize;

/// The `sub` claim when `[push] subject` is not set.
pub const DEFAULT_SUBJECT: &str = "mailto:root@localhost";

/// `[push]`, validated while parsing (a mistake names its line).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(try_from = "RawPushConfig")]
pub struct PushHostConfig {
    pub subject: String,
    /// Normalised origins: `scheme://host:port`, lower case, the port always written.
    pub allow_endpoints: Vec<String>,
}

impl Default for PushHostConfig {
    fn default() -> Self {
        PushHostConfig {
            subject: DEFAULT_SUBJECT.to_owned(),
            allow_endpoints: Vec::new(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPushConfig {
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    allow_endpoints: Vec<String>,
}

impl TryFrom<RawPushConfig> for PushHostConfig {
    type Error = String;

    fn try_from(raw: RawPushConfig) -> Result<Self, String> {
        let subject = raw.subject.unwrap_or_else(|| DEFAULT_SUBJECT.to_owned());
        if !(subject.starts_with("mailto:") || subject.starts_with("https://"))
            || subject.len() > 512
        {
            return Err(format!(
                "[push] subject {subject:?} must be a mailto: or https: URL (RFC 8292)"
            ));
        }
        let allow_endpoints = crate::outbound::allowed_origins(&raw.allow_endpoints, "push")?;
        Ok(PushHostConfig {
            subject,
            allow_endpoints,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HostConfig;
    use std::path::Path;

    #[test]
    fn push_settings_are_read_and_checked() {
        let path = Path::new("berth.toml");
        let config = HostConfig::parse(
            path,
            "[push]\nsubject = \"mailto:ops@example.com\"\nallow_endpoints = [\"http://127.0.0.1:8099\", \"HTTPS://Push.Example/\"]\n",
        )
        .unwrap();
        assert_eq!(config.push.subject, "mailto:ops@example.com");
        assert_eq!(
            config.push.allow_endpoints,
            ["http://127.0.0.1:8099", "https://push.example:443"]
        );
        assert_eq!(
            HostConfig::parse(path, "").unwrap().push,
            PushHostConfig::default()
        );
        for bad in [
            "[push]\nsubject = \"ops@example.com\"\n",
            "[push]\nallow_endpoints = [\"127.0.0.1:8099\"]\n",
            "[push]\nallow_endpoints = [\"http://127.0.0.1:8099/push\"]\n",
            "[push]\nallow_endpoints = [\"ftp://127.0.0.1\"]\n",
            "[push]\nallow_endpoints = [\"http://user@127.0.0.1\"]\n",
            "[push]\nallow = []\n",
        ] {
            let err = HostConfig::parse(path, bad).unwrap_err();
            assert!(err.to_string().starts_with("berth.toml:"), "{bad}: {err}");
        }
    }
}
