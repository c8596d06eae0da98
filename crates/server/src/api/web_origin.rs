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

use http::header::{HOST, ORIGIN, UPGRADE};
use http::{HeaderMap, Method};

use crate::api::error::ApiError;
use crate::ctx::Ctx;
use crate::public_url::{authority_without_default_port, PublicUrl};

pub use crate::tls::ServedOverTls as OverTls;

/// The base of links to berth's own pages: `--public-url`, else from the request.
pub fn base_url(ctx: &Ctx, headers: &HeaderMap, over_tls: bool) -> String {
    if let Some(url) = &ctx.public_url {
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
    if ctx.public_url.as_ref() == Some(&origin) {
        return true;
    }
    let Some(host) = header(headers, HOST.as_str()) else {
        return false;
    };
    let scheme = origin.scheme();
    let host = host.to_ascii_lowercase();
    authority_without_default_port(scheme, &host) == origin.authority()
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
