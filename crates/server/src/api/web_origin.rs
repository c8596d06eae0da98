//! Which origin is berth's own: the one pairing links are built on, and the only one a
//! signed-in browser's state-changing requests (and WebSocket upgrades) may come from.
//!
//! berth's origin is `berth up --public-url` when given; a request's own `Host` always
//! counts too (a browser sets `Host` and `Origin` itself: page script cannot forge either).
//! Only `host[:port]` is compared, as one port serves one scheme.
//!
//! Without `--public-url`, a pairing link is built from the request's `Host`: `https` when
//! the request came over berth's own TLS ([`OverTls`] in its extensions) or
//! `X-Forwarded-Proto: https` says a TLS proxy is in front, else `http`. That header is
//! trusted only to build the link shown to the API key's holder, never for a check.

use std::fmt;
use std::str::FromStr;

use http::header::{HOST, ORIGIN, UPGRADE};
use http::{HeaderMap, Method};

use crate::api::error::ApiError;
use crate::ctx::Ctx;

/// `scheme://host[:port]`, lowercase, without a default port or a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl(String);

#[derive(Debug, thiserror::Error)]
#[error("{value:?} is not an origin: expected http(s)://host[:port], with no path")]
pub struct InvalidPublicUrl {
    value: String,
}

impl FromStr for PublicUrl {
    type Err = InvalidPublicUrl;

    fn from_str(value: &str) -> Result<PublicUrl, InvalidPublicUrl> {
        let invalid = || InvalidPublicUrl {
            value: value.to_owned(),
        };
        let lower = value.trim().to_ascii_lowercase();
        let (scheme, rest) = lower.split_once("://").ok_or_else(invalid)?;
        if scheme != "http" && scheme != "https" {
            return Err(invalid());
        }
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        let authority = authority_without_default_port(scheme, authority);
        let well_formed = !authority.is_empty()
            && authority
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !well_formed {
            return Err(invalid());
        }
        Ok(PublicUrl(format!("{scheme}://{authority}")))
    }
}

impl fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PublicUrl {
    fn authority(&self) -> &str {
        self.0.split_once("://").map_or("", |(_, a)| a)
    }
}

pub use crate::tls::ServedOverTls as OverTls;

/// The base of links to berth's own pages: `--public-url`, else from the request.
pub fn base_url(ctx: &Ctx, headers: &HeaderMap, over_tls: bool) -> String {
    if let Some(url) = &ctx.ports.public_url {
        return url.to_string();
    }
    let proxied_tls = header(headers, "x-forwarded-proto")
        .is_some_and(|proto| proto.eq_ignore_ascii_case("https"));
    let scheme = if over_tls || proxied_tls {
        "https"
    } else {
        "http"
    };
    let host = header(headers, HOST.as_str()).unwrap_or("localhost");
    format!("{scheme}://{}", host.to_ascii_lowercase())
}

/// Whether a cookie-authenticated request must show berth's origin: anything but a plain
/// GET or HEAD (a WebSocket upgrade is a GET that opens a two-way channel).
pub fn needs_check(method: &Method, headers: &HeaderMap) -> bool {
    let reads = method == Method::GET || method == Method::HEAD;
    !reads || headers.contains_key(UPGRADE)
}

/// `Origin` must be present and berth's own.
pub fn require_own(ctx: &Ctx, headers: &HeaderMap) -> Result<(), ApiError> {
    let origin = header(headers, ORIGIN.as_str());
    match origin {
        Some(origin) if is_own(ctx, headers, origin) => Ok(()),
        _ => Err(ApiError::BadOrigin {
            origin: origin.map(str::to_owned),
        }),
    }
}

/// `Origin`, when sent, must be berth's own (a sign-in: login CSRF).
pub fn refuse_foreign(ctx: &Ctx, headers: &HeaderMap) -> Result<(), ApiError> {
    match header(headers, ORIGIN.as_str()) {
        None => Ok(()),
        Some(_) => require_own(ctx, headers),
    }
}

fn is_own(ctx: &Ctx, headers: &HeaderMap, origin: &str) -> bool {
    // `null` (a sandboxed page, a redirect across origins) parses as no origin.
    let Ok(origin) = origin.parse::<PublicUrl>() else {
        return false;
    };
    if ctx.ports.public_url.as_ref() == Some(&origin) {
        return true;
    }
    let Some(host) = header(headers, HOST.as_str()) else {
        return false;
    };
    let scheme = origin.0.split_once("://").map_or("", |(s, _)| s);
    let host = host.to_ascii_lowercase();
    authority_without_default_port(scheme, &host) == origin.authority()
}

fn authority_without_default_port<'a>(scheme: &str, authority: &'a str) -> &'a str {
    let default = if scheme == "https" { ":443" } else { ":80" };
    authority.strip_suffix(default).unwrap_or(authority)
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls_are_origins() {
        let url: PublicUrl = "HTTPS://Berth.Example:443/".parse().unwrap();
        assert_eq!(url.to_string(), "https://berth.example");
        assert_eq!(
            "http://10.0.0.2:7070".parse::<PublicUrl>().unwrap().0,
            "http://10.0.0.2:7070"
        );
        for bad in [
            "berth.example",
            "ftp://x",
            "https://x/app",
            "https://",
            "null",
            "https://a b",
        ] {
            assert!(bad.parse::<PublicUrl>().is_err(), "{bad}");
        }
    }

    #[test]
    fn only_writes_and_upgrades_are_checked() {
        let mut headers = HeaderMap::new();
        assert!(!needs_check(&Method::GET, &headers));
        assert!(!needs_check(&Method::HEAD, &headers));
        assert!(needs_check(&Method::POST, &headers));
        assert!(needs_check(&Method::DELETE, &headers));
        headers.insert(UPGRADE, "websocket".parse().unwrap());
        assert!(needs_check(&Method::GET, &headers));
    }
}
