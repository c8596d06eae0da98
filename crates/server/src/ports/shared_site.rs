//! `[ports] base_domain` must not share a registrable domain (a "site", read from the
//! Public Suffix List compiled in) with the host name browsers reach berth by: a page at a
//! port's host name is an origin of its own, not sandboxed, and page script there can set
//! cookies for the whole registrable domain, which the browser then sends to berth too
//! (docs/security.md, "A box's app setting berth's cookies"). berth cannot stop that from
//! the server, so `berth up` warns: at start when `--public-url` names berth's host, else
//! once, the first time a request's `Host` shows it.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::ports::host::strip_port;
use crate::public_url::PublicUrl;

/// The registrable domain of `host` (lowercase, `:port` ignored): `berth.example.co.uk`
/// → `example.co.uk`. `None` for an IP address or a name that is a public suffix itself.
pub fn registrable_domain(host: &str) -> Option<String> {
    let host = strip_port(host.trim())
        .trim_end_matches('.')
        .to_ascii_lowercase();
    if host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
        return None;
    }
    let domain = psl::domain(host.as_bytes())?;
    std::str::from_utf8(domain.as_bytes())
        .ok()
        .map(str::to_owned)
}

/// The registrable domain that berth's host `api_host` and `base_domain` share, if any.
pub fn shared_site(api_host: &str, base_domain: &str) -> Option<String> {
    let api = registrable_domain(api_host)?;
    (registrable_domain(base_domain)? == api).then_some(api)
}

/// The warning, said at most once per daemon.
#[derive(Debug)]
pub struct SharedSiteWarning {
    base_domain: Option<String>,
    /// Warned already, or nothing left to check (no base domain, or `--public-url`
    /// checked at start).
    done: AtomicBool,
}

impl SharedSiteWarning {
    /// Checks `--public-url` now when given (the requests' `Host` is then not consulted).
    pub fn new(base_domain: Option<&str>, public_url: Option<&PublicUrl>) -> SharedSiteWarning {
        let warning = SharedSiteWarning {
            base_domain: base_domain.map(str::to_owned),
            done: AtomicBool::new(base_domain.is_none()),
        };
        if let Some(url) = public_url {
            warning.check(url.authority());
            warning.done.store(true, Ordering::Relaxed);
        }
        warning
    }

    /// Warns if `host` (a request's `Host` for the API, or `--public-url`'s) shares a
    /// registrable domain with the base domain, unless warned already.
    pub fn check(&self, host: &str) {
        if self.done.load(Ordering::Relaxed) {
            return;
        }
        let Some(base) = self.base_domain.as_deref() else {
            return;
        };
        let Some(site) = shared_site(host, base) else {
            return;
        };
        if !self.done.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                host = strip_port(host),
                base_domain = base,
                "[ports] base_domain {base} shares the registrable domain {site} with berth's own host {}: a page at a box's port host name can set cookies for all of {site}, which browsers then send to berth (sign users in as another tenant, or out). Set base_domain under another registrable domain (docs/security.md)",
                strip_port(host)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_by_the_public_suffix_list() {
        assert_eq!(
            registrable_domain("Berth.Example.co.uk:8443").as_deref(),
            Some("example.co.uk")
        );
        assert_eq!(
            registrable_domain("alice.github.io").as_deref(),
            Some("alice.github.io")
        );
        for none in ["127.0.0.1:7070", "[::1]:80", "localhost", "co.uk", "com"] {
            assert_eq!(registrable_domain(none), None, "{none}");
        }
    }

    #[test]
    fn a_base_domain_sharing_berths_site_is_found() {
        assert_eq!(
            shared_site("berth.example.com", "boxes.example.com").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            shared_site("example.com:443", "boxes.example.com").as_deref(),
            Some("example.com")
        );
        assert_eq!(
            shared_site("berth.example.com", "boxes.berth.example.com").as_deref(),
            Some("example.com")
        );
        for (api, base) in [
            ("berth.example.com", "example-boxes.net"),
            ("127.0.0.1:7070", "boxes.example.com"),
            // Each is its own site: github.io is a public suffix.
            ("alice.github.io", "bob.github.io"),
            ("berth.localhost", "boxes.localhost"),
        ] {
            assert_eq!(shared_site(api, base), None, "{api} and {base}");
        }
    }

    #[test]
    fn warned_once_and_only_when_shared() {
        let warning = SharedSiteWarning::new(Some("boxes.example.com"), None);
        warning.check("127.0.0.1:7070");
        assert!(!warning.done.load(Ordering::Relaxed));
        warning.check("berth.example.com");
        assert!(warning.done.load(Ordering::Relaxed));
        let at_start = SharedSiteWarning::new(
            Some("boxes.example.com"),
            Some(&"https://berth.example.net".parse().unwrap()),
        );
        assert!(at_start.done.load(Ordering::Relaxed), "checked at start");
        assert!(SharedSiteWarning::new(None, None)
            .done
            .load(Ordering::Relaxed));
    }
}
