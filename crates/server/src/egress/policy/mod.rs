//! A box's egress policy as templates and box specs write it: the allowlist and the
//! credential rules. Validated once, when a template loads or a box is created, into the
//! canonical form the gateway compares against.

use berth_egress::hostname::canonical_host;
use berth_egress::intercept::{is_method, CredentialRule};
use berth_egress::policy::Allowlist;
use serde::{Deserialize, Serialize};

/// At most this many `allow` patterns, credential rules, and hosts in one rule. A policy
/// is written by people; the bound keeps the checks (quadratic in the worst case) and the
/// gateway's per-connection matching cheap on a 1 MiB request body or template file.
pub const MAX_ALLOW: usize = 256;
pub const MAX_CREDENTIALS: usize = 64;
pub const MAX_RULE_HOSTS: usize = 64;
/// At most this many `methods`, and `paths`, in one rule.
pub const MAX_RULE_SCOPES: usize = 64;

/// What a box may reach and which credentials the gateway sets for it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EgressPolicy {
    /// Exact host names and `*.suffix` wildcards, port 443 only. Empty: nothing leaves.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Hosts whose requests get a real secret from the host's secret store.
    #[serde(default)]
    pub credentials: Vec<CredentialSpec>,
}

/// One credential rule: requests to `hosts` that carry the box's placeholder (from the
/// environment variable `placeholder_env`) in `header` get the secret `name` there instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialSpec {
    /// The secret's name in the tenant's secret store (`berth secret set NAME`).
    pub name: String,
    /// Exact host names (no wildcards); each must be allowed by `allow`.
    pub hosts: Vec<String>,
    /// The header that carries it, e.g. `x-api-key` or `authorization` (for `authorization`,
    /// the secret is the whole value, e.g. `Bearer sk-…`; the box may send `Bearer <placeholder>`).
    pub header: String,
    /// The environment variable the box finds its placeholder in, e.g. `ANTHROPIC_API_KEY`.
    pub placeholder_env: String,
    /// Upper-case HTTP methods the secret is set for, e.g. `["POST"]`; empty: any method.
    /// Other requests pass the placeholder on unchanged (audited as `withheld`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub methods: Vec<String>,
    /// Path prefixes the secret is set for, e.g. `["/v1/messages"]` (covers
    /// `/v1/messages/batches`, not `/v1/messagesX`); empty: any path. A request path that
    /// could be read two ways (`..`, `%2e`, `//`, `;`) never gets the secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// Why a policy was refused. Each names the offending entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("`{list}` holds {count} entries; at most {max}")]
    TooMany {
        list: &'static str,
        count: usize,
        max: usize,
    },
    #[error("credentials[{index}] ({name}): `hosts` holds {count} entries; at most {max}")]
    TooManyHosts {
        index: usize,
        name: String,
        count: usize,
        max: usize,
    },
    #[error("allow[{index}] {pattern:?} is not a host name or `*.suffix` wildcard (e.g. \"api.anthropic.com\", \"*.github.com\")")]
    Pattern { index: usize, pattern: String },
    #[error(
        "credentials[{index}]: name {name:?} is not a secret name ([a-z0-9][a-z0-9_-]{{0,62}})"
    )]
    Name { index: usize, name: String },
    #[error("credentials[{index}] ({name}): the rule names no host")]
    NoHosts { index: usize, name: String },
    #[error("credentials[{index}] ({name}): host {host:?} is not an exact host name (rules take no wildcards)")]
    Host {
        index: usize,
        name: String,
        host: String,
    },
    #[error(
        "credentials[{index}] ({name}): host {host:?} is not allowed by `allow`; add it there too"
    )]
    NotAllowed {
        index: usize,
        name: String,
        host: String,
    },
    #[error("credentials[{index}] ({name}): header {header:?} is not an HTTP header name")]
    Header {
        index: usize,
        name: String,
        header: String,
    },
    #[error("credentials[{index}] ({name}): placeholder_env {var:?} is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")]
    Env {
        index: usize,
        name: String,
        var: String,
    },
    #[error(
        "credentials[{index}] ({name}): placeholder_env {var:?} is already used by another rule"
    )]
    DuplicateEnv {
        index: usize,
        name: String,
        var: String,
    },
    #[error("credentials[{index}] ({name}): method {method:?} is not an upper-case HTTP method (e.g. \"POST\")")]
    Method {
        index: usize,
        name: String,
        method: String,
    },
    #[error("credentials[{index}] ({name}): path {path:?} is not a path prefix: it must start with `/` and hold no query, `%` escapes, `//`, `.` or `..` segments (e.g. \"/v1/messages\")")]
    Path {
        index: usize,
        name: String,
        path: String,
    },
    #[error("credentials[{index}] ({name}): `{list}` holds {count} entries; at most {max}")]
    TooManyScopes {
        index: usize,
        name: String,
        list: &'static str,
        count: usize,
        max: usize,
    },
    #[error("credentials[{index}] ({name}): placeholder_env {var:?} is set by berth-init itself (the proxy, trust bundle or login variables); pick another name")]
    ReservedEnv {
        index: usize,
        name: String,
        var: String,
    },
}

/// Variables every box process gets from `berth-init` (docs/protocol.md): a placeholder
/// there would switch off the box's egress or its trust bundle.
pub(crate) const RESERVED_ENV: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "NO_PROXY",
    "no_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
];

impl EgressPolicy {
    /// A box's own policy as the store keeps it (`ops::box_create::own_egress` wrote it).
    /// Fails closed: JSON that no longer parses or validates (a hand-edited row, a rule a
    /// newer check refuses) is logged and yields the empty policy, never the template's
    /// wider one.
    pub fn from_stored(id: &berth_protocol::BoxId, json: &str) -> EgressPolicy {
        let policy = match serde_json::from_str::<EgressPolicy>(json) {
            Ok(policy) => policy,
            Err(e) => {
                tracing::error!(box_id = %id, error = %e, "the box's stored egress policy is not JSON of a policy; nothing leaves the box");
                return EgressPolicy::default();
            }
        };
        policy.validated().unwrap_or_else(|e| {
            tracing::error!(box_id = %id, error = %e, "the box's stored egress policy is refused; nothing leaves the box");
            EgressPolicy::default()
        })
    }

    /// Checks every entry and returns the policy in canonical form (host names lower case
    /// without a trailing dot, header names lower case), so equal policies compare equal.
    pub fn validated(&self) -> Result<EgressPolicy, PolicyError> {
        for (list, count, max) in [
            ("allow", self.allow.len(), MAX_ALLOW),
            ("credentials", self.credentials.len(), MAX_CREDENTIALS),
        ] {
            if count > max {
                return Err(PolicyError::TooMany { list, count, max });
            }
        }
        let mut allow = Vec::with_capacity(self.allow.len());
        for (index, pattern) in self.allow.iter().enumerate() {
            let bad = || PolicyError::Pattern {
                index,
                pattern: pattern.clone(),
            };
            Allowlist::new(std::slice::from_ref(pattern)).map_err(|_| bad())?;
            let canonical = match pattern.strip_prefix("*.") {
                Some(suffix) => format!("*.{}", canonical_host(suffix).map_err(|_| bad())?),
                None => canonical_host(pattern).map_err(|_| bad())?,
            };
            if !allow.contains(&canonical) {
                allow.push(canonical);
            }
        }
        let list = Allowlist::new(&allow).expect("each pattern was checked");
        let mut credentials = Vec::with_capacity(self.credentials.len());
        for (index, rule) in self.credentials.iter().enumerate() {
            let name = rule.name.clone();
            if !is_secret_name(&name) {
                return Err(PolicyError::Name { index, name });
            }
            if rule.hosts.is_empty() {
                return Err(PolicyError::NoHosts { index, name });
            }
            if rule.hosts.len() > MAX_RULE_HOSTS {
                return Err(PolicyError::TooManyHosts {
                    index,
                    name,
                    count: rule.hosts.len(),
                    max: MAX_RULE_HOSTS,
                });
            }
            let mut hosts = Vec::with_capacity(rule.hosts.len());
            for host in &rule.hosts {
                let canonical = (!host.contains('*'))
                    .then(|| canonical_host(host).ok())
                    .flatten()
                    .ok_or_else(|| PolicyError::Host {
                        index,
                        name: name.clone(),
                        host: host.clone(),
                    })?;
                if !list.allows(&canonical) {
                    return Err(PolicyError::NotAllowed {
                        index,
                        name,
                        host: host.clone(),
                    });
                }
                if !hosts.contains(&canonical) {
                    hosts.push(canonical);
                }
            }
            let header = rule.header.to_ascii_lowercase();
            if header.is_empty() || !header.bytes().all(is_token_byte) {
                return Err(PolicyError::Header {
                    index,
                    name,
                    header: rule.header.clone(),
                });
            }
            let var = rule.placeholder_env.clone();
            if !is_env_name(&var) {
                return Err(PolicyError::Env { index, name, var });
            }
            if RESERVED_ENV.contains(&var.as_str()) {
                return Err(PolicyError::ReservedEnv { index, name, var });
            }
            if credentials
                .iter()
                .any(|r: &CredentialSpec| r.placeholder_env == var)
            {
                return Err(PolicyError::DuplicateEnv { index, name, var });
            }
            let (methods, paths) = scopes(index, &name, rule)?;
            credentials.push(CredentialSpec {
                name,
                hosts,
                header,
                placeholder_env: var,
                methods,
                paths,
            });
        }
        Ok(EgressPolicy { allow, credentials })
    }

    /// The allowlist the gateway enforces (call on a validated policy).
    pub fn allowlist(&self) -> Allowlist {
        Allowlist::new(&self.allow).expect("a validated policy")
    }

    /// The exact names of the allowlist: what `/etc/hosts` pins (wildcards cannot be).
    pub fn pinned_hosts(&self) -> Vec<String> {
        self.allow
            .iter()
            .filter(|p| !p.starts_with("*."))
            .cloned()
            .collect()
    }
}

/// A rule's `methods` and `paths`, checked the way the gateway will use them (paths in
/// normal form, duplicates dropped).
fn scopes(
    index: usize,
    name: &str,
    rule: &CredentialSpec,
) -> Result<(Vec<String>, Vec<String>), PolicyError> {
    for (list, count) in [("methods", rule.methods.len()), ("paths", rule.paths.len())] {
        if count > MAX_RULE_SCOPES {
            return Err(PolicyError::TooManyScopes {
                index,
                name: name.to_owned(),
                list,
                count,
                max: MAX_RULE_SCOPES,
            });
        }
    }
    let mut methods = Vec::with_capacity(rule.methods.len());
    for method in &rule.methods {
        if !is_method(method) {
            return Err(PolicyError::Method {
                index,
                name: name.to_owned(),
                method: method.clone(),
            });
        }
        if !methods.contains(method) {
            methods.push(method.clone());
        }
    }
    // The gateway's own check, so a policy that validates is one the gateway accepts.
    let none: [&str; 0] = [];
    let mut paths = Vec::with_capacity(rule.paths.len());
    for path in &rule.paths {
        let checked = CredentialRule::new("check", &["a.example"], "x", "p", "s")
            .and_then(|r| r.restricted(&none, std::slice::from_ref(path)));
        match checked {
            Ok(r) => {
                if !paths.contains(&r.paths[0]) {
                    paths.push(r.paths[0].clone());
                }
            }
            Err(_) => {
                return Err(PolicyError::Path {
                    index,
                    name: name.to_owned(),
                    path: path.clone(),
                })
            }
        }
    }
    Ok((methods, paths))
}

/// A secret's name: what `berth secret set` and `POST /v1/secrets` accept.
pub fn is_secret_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes
            .iter()
            .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn is_env_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && (bytes[0].is_ascii_alphabetic() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests;
