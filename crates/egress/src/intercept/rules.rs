//! Credential rules: which header of which hosts gets the real secret, and the placeholder
//! the box must send to get it. The secret is never logged: `Debug` redacts it and no error
//! carries it.

use super::path;
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
    /// Upper-case methods the secret is set for; empty: any.
    pub methods: Vec<String>,
    /// Normalised path prefixes the secret is set for ([`path::prefix`]); empty: any.
    pub paths: Vec<String>,
}

/// Why a request that carried the placeholder did not get the secret. The placeholder
/// goes upstream unchanged and the audit line says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// The method is not one of the rule's `methods`.
    Method,
    /// The path is under none of the rule's `paths`.
    Path,
    /// The path could be read two ways (`..`, `%2e`, `//`, `;`): never matched.
    AmbiguousPath,
}

impl Withheld {
    pub fn code(self) -> &'static str {
        match self {
            Withheld::Method => "method",
            Withheld::Path => "path",
            Withheld::AmbiguousPath => "path_ambiguous",
        }
    }
}

impl std::fmt::Debug for CredentialRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CredentialRule")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("header", &self.header)
            .field("placeholder", &self.placeholder)
            .field("secret", &"<redacted>")
            .field("methods", &self.methods)
            .field("paths", &self.paths)
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
    #[error("credential rule {rule:?}: method {method:?} is not an upper-case HTTP method token")]
    Method { rule: String, method: String },
    #[error("credential rule {rule:?}: path {path:?} is not a clean absolute path prefix (starts with `/`; no query, `%` escapes, `//`, `.` or `..` segments)")]
    Path { rule: String, path: String },
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
            methods: Vec::new(),
            paths: Vec::new(),
        })
    }

    /// The rule restricted to `methods` (upper-case tokens) and path prefixes `paths`
    /// (each starting with `/`); an empty list does not restrict.
    pub fn restricted(
        mut self,
        methods: &[impl AsRef<str>],
        paths: &[impl AsRef<str>],
    ) -> Result<CredentialRule, RuleError> {
        for method in methods {
            let method = method.as_ref();
            if !is_method(method) {
                return Err(RuleError::Method {
                    rule: self.name,
                    method: method.to_owned(),
                });
            }
            self.methods.push(method.to_owned());
        }
        for p in paths {
            let Some(prefix) = path::prefix(p.as_ref()) else {
                return Err(RuleError::Path {
                    rule: self.name,
                    path: p.as_ref().to_owned(),
                });
            };
            self.paths.push(prefix);
        }
        Ok(self)
    }

    /// Whether a request `method target` may get the secret.
    pub fn covers(&self, method: &str, target: &str) -> Result<(), Withheld> {
        if !self.methods.is_empty() && !self.methods.iter().any(|m| m == method) {
            return Err(Withheld::Method);
        }
        if self.paths.is_empty() {
            return Ok(());
        }
        let path = path::normalise(target).ok_or(Withheld::AmbiguousPath)?;
        if self.paths.iter().any(|prefix| path::under(&path, prefix)) {
            Ok(())
        } else {
            Err(Withheld::Path)
        }
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

/// An HTTP method as a rule names it: an upper-case token (`POST`, `PATCH`).
pub fn is_method(m: &str) -> bool {
    !m.is_empty()
        && m.len() <= 32
        && m.bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
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
    fn methods_and_paths_restrict() {
        let r = rule("x-api-key")
            .restricted(&["POST"], &["/v1/messages"])
            .unwrap();
        assert_eq!(r.covers("POST", "/v1/messages?x=1"), Ok(()));
        assert_eq!(r.covers("POST", "/v1/messages/batches"), Ok(()));
        assert_eq!(r.covers("GET", "/v1/messages"), Err(Withheld::Method));
        assert_eq!(r.covers("post", "/v1/messages"), Err(Withheld::Method));
        assert_eq!(r.covers("POST", "/v1/messagesX"), Err(Withheld::Path));
        assert_eq!(
            r.covers("POST", "/v1/messages/../admin"),
            Err(Withheld::AmbiguousPath)
        );
        let none: [&str; 0] = [];
        assert_eq!(rule("x-api-key").covers("DELETE", "/../x"), Ok(()));
        assert!(matches!(
            rule("x").restricted(&["post"], &none),
            Err(RuleError::Method { .. })
        ));
        assert!(matches!(
            rule("x").restricted(&none, &["v1"]),
            Err(RuleError::Path { .. })
        ));
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
