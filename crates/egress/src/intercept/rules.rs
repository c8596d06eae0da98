//! Credential rules: which header of which hosts gets the real secret, and the placeholder
//! the box must send to get it. The secret is never logged: `Debug` redacts it and no error
//! carries it.

use crate::hostname::{canonical_host, HostError};

/// Headers that carry credentials. The gateway strips every one of them (any case) from
/// every intercepted request; the only credential that reaches upstream is one it set.
pub const CREDENTIAL_HEADERS: [&str; 4] = [
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "cookie",
];

#[derive(Clone)]
pub struct CredentialRule {
    pub name: String,
    /// Canonical exact host names (no wildcards: a secret goes only to a name spelled out).
    pub hosts: Vec<String>,
    /// Lower-case header name, e.g. `x-api-key` or `authorization`.
    pub header: String,
    /// What the box holds instead of the secret, e.g. `berth-ph-<random>`.
    pub placeholder: String,
    /// The real header value, sent as given (`Bearer sk-…` for `authorization`).
    pub secret: String,
}

impl std::fmt::Debug for CredentialRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialRule")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("header", &self.header)
            .field("placeholder", &self.placeholder)
            .field("secret", &"<redacted>")
            .finish()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    #[error("credential rule {rule:?}: host {host:?} is not a valid host name")]
    Host {
        rule: String,
        host: String,
        #[source]
        source: HostError,
    },
    #[error("credential rule {rule:?}: host {host:?} is a wildcard; rules take exact names")]
    Wildcard { rule: String, host: String },
    #[error("credential rule {rule:?} names no host")]
    NoHosts { rule: String },
    #[error("credential rule {rule:?}: {header:?} is not a valid header name")]
    Header { rule: String, header: String },
    #[error("credential rule {rule:?}: the placeholder is empty or not a valid header value")]
    Placeholder { rule: String },
    /// Deliberately without the value.
    #[error("credential rule {rule:?}: the secret is empty or not a valid header value")]
    Secret { rule: String },
}

impl CredentialRule {
    /// Validates and canonicalises: host names as the SNI is compared, the header in lower
    /// case, values free of CR/LF/NUL so they cannot split the request head.
    pub fn new(
        name: impl Into<String>,
        hosts: &[impl AsRef<str>],
        header: &str,
        placeholder: impl Into<String>,
        secret: impl Into<String>,
    ) -> Result<CredentialRule, RuleError> {
        let name = name.into();
        let placeholder = placeholder.into();
        let secret = secret.into();
        if hosts.is_empty() {
            return Err(RuleError::NoHosts { rule: name });
        }
        let mut canonical = Vec::with_capacity(hosts.len());
        for host in hosts {
            let host = host.as_ref();
            if host.starts_with("*.") {
                return Err(RuleError::Wildcard {
                    rule: name,
                    host: host.to_owned(),
                });
            }
            let c = canonical_host(host).map_err(|source| RuleError::Host {
                rule: name.clone(),
                host: host.to_owned(),
                source,
            })?;
            canonical.push(c);
        }
        if header.is_empty() || !header.bytes().all(is_token_byte) {
            return Err(RuleError::Header {
                rule: name,
                header: header.to_owned(),
            });
        }
        if !valid_value(&placeholder) {
            return Err(RuleError::Placeholder { rule: name });
        }
        if !valid_value(&secret) {
            return Err(RuleError::Secret { rule: name });
        }
        Ok(CredentialRule {
            name,
            hosts: canonical,
            header: header.to_ascii_lowercase(),
            placeholder,
            secret,
        })
    }

    pub fn applies_to(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| h == host)
    }

    /// Whether the box sent this rule's placeholder: exactly, or as `Bearer <placeholder>`
    /// in `authorization` (the scheme in any case, as RFC 9110 allows).
    pub fn is_placeholder(&self, value: &[u8]) -> bool {
        let value = value.trim_ascii();
        if value == self.placeholder.as_bytes() {
            return true;
        }
        if self.header == "authorization" && value.len() > 7 {
            let (scheme, rest) = value.split_at(7);
            return scheme.eq_ignore_ascii_case(b"bearer ")
                && rest.trim_ascii() == self.placeholder.as_bytes();
        }
        false
    }
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn valid_value(v: &str) -> bool {
    !v.trim().is_empty() && !v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(header: &str) -> CredentialRule {
        CredentialRule::new(
            "anthropic",
            &["API.Example.test."],
            header,
            "berth-ph-abc",
            "sk-real",
        )
        .unwrap()
    }

    #[test]
    fn canonicalises_and_matches_hosts() {
        let r = rule("X-Api-Key");
        assert_eq!(r.hosts, ["api.example.test"]);
        assert_eq!(r.header, "x-api-key");
        assert!(r.applies_to("api.example.test"));
        assert!(!r.applies_to("other.example.test"));
    }

    #[test]
    fn placeholder_forms() {
        let key = rule("x-api-key");
        assert!(key.is_placeholder(b"berth-ph-abc"));
        assert!(!key.is_placeholder(b"Bearer berth-ph-abc"));
        assert!(!key.is_placeholder(b"berth-ph-abcd"));
        let auth = rule("authorization");
        assert!(auth.is_placeholder(b"Bearer berth-ph-abc"));
        assert!(auth.is_placeholder(b"bearer  berth-ph-abc"));
        assert!(!auth.is_placeholder(b"Basic berth-ph-abc"));
    }

    #[test]
    fn debug_redacts_and_errors_omit_the_secret() {
        let r = rule("x-api-key");
        assert!(!format!("{r:?}").contains("sk-real"));
        let err = CredentialRule::new("n", &["a.test"], "x-api-key", "ph", "sk-\r\nx").unwrap_err();
        assert!(matches!(err, RuleError::Secret { .. }));
        assert!(!format!("{err} {err:?}").contains("sk-"));
    }

    #[test]
    fn refuses_bad_rules() {
        let w = CredentialRule::new("n", &["*.a.test"], "x-api-key", "ph", "s");
        assert!(matches!(w, Err(RuleError::Wildcard { .. })));
        let h = CredentialRule::new("n", &["a.test"], "bad header", "ph", "s");
        assert!(matches!(h, Err(RuleError::Header { .. })));
        let none: [&str; 0] = [];
        let n = CredentialRule::new("n", &none, "x-api-key", "ph", "s");
        assert!(matches!(n, Err(RuleError::NoHosts { .. })));
    }
}
