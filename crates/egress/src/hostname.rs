//! Canonical DNS host names: the one spelling the gateway compares, logs and pins.
//!
//! The SNI, the CONNECT target and every allowlist entry go through [`canonical_host`], so
//! `API.Example.COM.` and `api.example.com` can never be two different names to the policy.
//!
//! Decisions (documented because they refuse things a resolver would accept):
//! - A name needs **at least two labels**. Single labels (`localhost`, `metadata`, an
//!   intranet short name) only mean something to a local search path and are never a public
//!   destination.
//! - Labels are LDH only (`a-z`, `0-9`, `-`), 1–63 bytes, not starting or ending with `-`.
//!   Underscores, spaces and non-ASCII are refused: an internationalised name must arrive as
//!   its `xn--` A-label, which is LDH already.
//! - An all-numeric last label is refused: no TLD is numeric, and resolvers turn names like
//!   `127.1` or `0x7f.1` style spellings into addresses, which would slip past the IP-literal
//!   check.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Longest name in presentation form without the trailing dot (RFC 1035: 255 octets on the
/// wire, which is 253 characters of text).
pub const MAX_HOST_LEN: usize = 253;
/// Longest label (RFC 1035).
pub const MAX_LABEL_LEN: usize = 63;

/// Why a name is not an acceptable host name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("host name is empty")]
    Empty,
    #[error("host name is longer than {MAX_HOST_LEN} characters")]
    TooLong,
    #[error("host name label {label:?} is not 1-63 letters, digits or inner hyphens")]
    BadLabel { label: String },
    #[error("host name is an IP address literal")]
    IpLiteral,
    #[error("host name has a single label; a public name needs at least two")]
    SingleLabel,
    #[error("host name's last label is all digits, which resolvers may read as an address")]
    NumericTld,
}

/// Lower-cases `name`, drops one trailing dot, and checks it is a valid public DNS name (see
/// the module docs): LDH labels of 1–63 bytes, ≤ 253 in total, at least two labels, not an
/// IPv4/IPv6 literal and not an all-numeric last label.
pub fn canonical_host(name: &str) -> Result<String, HostError> {
    // The literal checks come first so that `[::1]`, `::1` and `10.0.0.1` report the
    // precise reason rather than a bad label.
    let unbracketed = name
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(name);
    if unbracketed.parse::<Ipv6Addr>().is_ok() || name.parse::<Ipv4Addr>().is_ok() {
        return Err(HostError::IpLiteral);
    }
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if trimmed.is_empty() {
        return Err(HostError::Empty);
    }
    if trimmed.len() > MAX_HOST_LEN {
        return Err(HostError::TooLong);
    }
    if trimmed.parse::<Ipv4Addr>().is_ok() {
        return Err(HostError::IpLiteral);
    }
    let lower = trimmed.to_ascii_lowercase();
    let mut labels = 0usize;
    let mut last = "";
    for label in lower.split('.') {
        check_label(label)?;
        labels += 1;
        last = label;
    }
    if labels < 2 {
        return Err(HostError::SingleLabel);
    }
    if last.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HostError::NumericTld);
    }
    Ok(lower)
}

/// One lower-cased label: 1–63 LDH bytes, no hyphen at either end.
fn check_label(label: &str) -> Result<(), HostError> {
    let bytes = label.as_bytes();
    let ok = !bytes.is_empty()
        && bytes.len() <= MAX_LABEL_LEN
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes.first() != Some(&b'-')
        && bytes.last() != Some(&b'-');
    if ok {
        Ok(())
    } else {
        Err(HostError::BadLabel {
            label: label.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_cases_and_drops_one_trailing_dot() {
        assert_eq!(
            canonical_host("API.Anthropic.COM.").unwrap(),
            "api.anthropic.com"
        );
        assert_eq!(
            canonical_host("api.anthropic.com").unwrap(),
            "api.anthropic.com"
        );
        assert_eq!(
            canonical_host("xn--bcher-kva.example").unwrap(),
            "xn--bcher-kva.example"
        );
        assert_eq!(canonical_host("a-b.c0.io").unwrap(), "a-b.c0.io");
    }

    #[test]
    fn refuses_two_trailing_dots_and_empty_labels() {
        assert!(matches!(
            canonical_host("example.com.."),
            Err(HostError::BadLabel { .. })
        ));
        assert!(matches!(
            canonical_host(".example.com"),
            Err(HostError::BadLabel { .. })
        ));
        assert!(matches!(
            canonical_host("a..com"),
            Err(HostError::BadLabel { .. })
        ));
    }

    #[test]
    fn refuses_empty() {
        assert_eq!(canonical_host(""), Err(HostError::Empty));
        assert_eq!(canonical_host("."), Err(HostError::Empty));
    }

    #[test]
    fn refuses_single_labels() {
        assert_eq!(canonical_host("localhost"), Err(HostError::SingleLabel));
        assert_eq!(canonical_host("LOCALHOST."), Err(HostError::SingleLabel));
        assert_eq!(canonical_host("metadata"), Err(HostError::SingleLabel));
    }

    #[test]
    fn refuses_ip_literals() {
        for lit in [
            "127.0.0.1",
            "10.0.0.1.",
            "169.254.169.254",
            "::1",
            "[::1]",
            "::ffff:127.0.0.1",
            "fd00:ec2::254",
            "2606:4700::1111",
        ] {
            assert_eq!(canonical_host(lit), Err(HostError::IpLiteral), "{lit}");
        }
    }

    #[test]
    fn refuses_numeric_last_label() {
        assert_eq!(canonical_host("127.1"), Err(HostError::NumericTld));
        assert_eq!(canonical_host("a.b.300"), Err(HostError::NumericTld));
        assert_eq!(canonical_host("1.2.3.4.5"), Err(HostError::NumericTld));
        // Numeric labels elsewhere are fine (e.g. 1password.com, 3.example.org).
        assert!(canonical_host("3.example.org").is_ok());
    }

    #[test]
    fn refuses_bad_characters() {
        for bad in [
            "exa_mple.com",
            "-ex.com",
            "ex-.com",
            "ex ample.com",
            "bücher.example",
            "a.com:443",
            "a/b.com",
            "*.example.com",
            "a.com\0",
        ] {
            assert!(
                matches!(canonical_host(bad), Err(HostError::BadLabel { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn length_limits() {
        let label63 = "a".repeat(63);
        assert!(canonical_host(&format!("{label63}.com")).is_ok());
        let label64 = "a".repeat(64);
        assert!(matches!(
            canonical_host(&format!("{label64}.com")),
            Err(HostError::BadLabel { .. })
        ));
        // 4 labels of 61 + 3 dots + "com" = 244+ ... build exactly 253 and 254.
        let base = format!("{l}.{l}.{l}.{l}", l = "a".repeat(61)); // 247
        let ok = format!("{base}.abcde"); // 253
        assert_eq!(ok.len(), 253);
        assert!(canonical_host(&ok).is_ok());
        assert!(canonical_host(&format!("{ok}.")).is_ok());
        let long = format!("{base}.abcdef"); // 254
        assert_eq!(canonical_host(&long), Err(HostError::TooLong));
    }
}
