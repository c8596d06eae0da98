//! A box's egress allowlist: exact names and `*.suffix` wildcards, compared on canonical
//! names only (see [`crate::hostname`]).

use std::collections::BTreeSet;

use crate::hostname::{canonical_host, HostError};

/// The only destination port a box may reach.
pub const EGRESS_PORT: u16 = 443;

/// Why an allowlist pattern was refused.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The pattern (or the suffix after `*.`) is not a valid multi-label host name. This is
    /// also how `*`, `*.com`, `a.*.com` and `**.x.com` are refused.
    #[error("allowlist pattern {pattern:?} is not a valid host name or `*.suffix` wildcard")]
    BadPattern {
        pattern: String,
        #[source]
        source: HostError,
    },
}

/// The set of names a box may reach.
///
/// A wildcard `*.example.com` matches `a.example.com` and `a.b.example.com` (one or more
/// labels below the suffix) but never `example.com` itself: list that separately if wanted.
/// A wildcard's suffix must have at least two labels, so `*.com` is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowlist {
    exact: BTreeSet<String>,
    /// Canonical suffixes, stored with a leading dot (`.example.com`) so that matching is a
    /// plain `ends_with` that cannot match `badexample.com`.
    suffixes: BTreeSet<String>,
}

impl Allowlist {
    /// Builds the allowlist from exact names and `*.suffix` wildcards; each is canonicalised
    /// (`API.Example.com.` is stored as `api.example.com`).
    pub fn new(patterns: &[String]) -> Result<Allowlist, PolicyError> {
        let mut list = Allowlist::default();
        for pattern in patterns {
            let bad = |source| PolicyError::BadPattern {
                pattern: pattern.clone(),
                source,
            };
            if let Some(suffix) = pattern.strip_prefix("*.") {
                let suffix = canonical_host(suffix).map_err(bad)?;
                list.suffixes.insert(format!(".{suffix}"));
            } else {
                list.exact.insert(canonical_host(pattern).map_err(bad)?);
            }
        }
        Ok(list)
    }

    /// Whether `host` may be reached. `host` must already be canonical (the output of
    /// [`canonical_host`]); a non-canonical spelling simply does not match.
    pub fn allows(&self, host: &str) -> bool {
        if self.exact.contains(host) {
            return true;
        }
        self.suffixes.iter().any(|suffix| {
            // At least one non-empty label before the suffix: `.example.com` itself (or the
            // bare suffix) is not matched because the stored suffix starts with a dot.
            host.len() > suffix.len() && host.ends_with(suffix.as_str())
        })
    }

    /// The exact names, sorted, for pinning in the box's `/etc/hosts`. Wildcards cannot be
    /// pinned; they are reachable through the CONNECT proxy only.
    pub fn exact_hosts(&self) -> impl Iterator<Item = &str> {
        self.exact.iter().map(String::as_str)
    }

    /// The wildcard suffixes without the `*.` (e.g. `github.com` for `*.github.com`), sorted.
    pub fn wildcard_suffixes(&self) -> impl Iterator<Item = &str> {
        self.suffixes.iter().map(|s| &s[1..])
    }

    /// Whether nothing at all is allowed.
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.suffixes.is_empty()
    }
}

/// Whether `port` is the egress port (443 only).
pub fn allows_port(port: u16) -> bool {
    port == EGRESS_PORT
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(patterns: &[&str]) -> Result<Allowlist, PolicyError> {
        Allowlist::new(&patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn exact_names_match_only_themselves() {
        let allow = list(&["api.anthropic.com"]).unwrap();
        assert!(allow.allows("api.anthropic.com"));
        assert!(!allow.allows("anthropic.com"));
        assert!(!allow.allows("x.api.anthropic.com"));
        assert!(!allow.allows("api.anthropic.com.evil.net"));
        assert!(!allow.allows("evilapi.anthropic.com"));
    }

    #[test]
    fn patterns_are_canonicalised() {
        let allow = list(&["API.Anthropic.COM.", "*.GitHub.com."]).unwrap();
        assert!(allow.allows("api.anthropic.com"));
        assert!(allow.allows("raw.github.com"));
        assert_eq!(
            allow.exact_hosts().collect::<Vec<_>>(),
            ["api.anthropic.com"]
        );
        assert_eq!(
            allow.wildcard_suffixes().collect::<Vec<_>>(),
            ["github.com"]
        );
    }

    #[test]
    fn non_canonical_host_does_not_match() {
        let allow = list(&["api.anthropic.com"]).unwrap();
        assert!(!allow.allows("API.anthropic.com"));
        assert!(!allow.allows("api.anthropic.com."));
    }

    #[test]
    fn wildcard_matches_one_or_more_labels_below_never_the_suffix() {
        let allow = list(&["*.github.com"]).unwrap();
        assert!(allow.allows("api.github.com"));
        assert!(allow.allows("a.b.github.com"));
        assert!(!allow.allows("github.com"));
        assert!(!allow.allows(".github.com"));
        assert!(!allow.allows("evilgithub.com"));
        assert!(!allow.allows("github.com.evil.net"));
        assert!(!allow.allows("api.github.co"));
    }

    #[test]
    fn refuses_broad_or_malformed_patterns() {
        for bad in [
            "*",
            "*.com",
            "*.",
            "**.github.com",
            "a.*.com",
            "*github.com",
            "localhost",
            "10.0.0.1",
            "",
            "*.127.0.0.1",
        ] {
            assert!(
                matches!(list(&[bad]), Err(PolicyError::BadPattern { ref pattern, .. }) if pattern == bad),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn empty_allowlist_allows_nothing() {
        let allow = list(&[]).unwrap();
        assert!(allow.is_empty());
        assert!(!allow.allows("api.anthropic.com"));
        assert_eq!(allow.exact_hosts().count(), 0);
    }

    #[test]
    fn exact_hosts_are_sorted_and_deduplicated() {
        let allow = list(&[
            "b.example.com",
            "a.example.com",
            "B.example.com",
            "*.x.example.com",
        ])
        .unwrap();
        assert_eq!(
            allow.exact_hosts().collect::<Vec<_>>(),
            ["a.example.com", "b.example.com"]
        );
    }

    #[test]
    fn only_443() {
        assert!(allows_port(443));
        for p in [0, 22, 80, 8443, 3128, u16::MAX] {
            assert!(!allows_port(p));
        }
    }
}
