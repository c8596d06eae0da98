//! The web app's files (crate `berth-webapp`, built from `web/` and embedded): `/`,
//! `/index.html`, `/sw.js`, `/manifest.webmanifest`, `/icons/*`, `/assets/*`, with cache
//! headers, ETags, gzip and the app's Content-Security-Policy (docs/webapp.md).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use berth_webapp::WebFile;
use http::header::{
    ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_SECURITY_POLICY, CONTENT_TYPE, ETAG,
    IF_NONE_MATCH, VARY,
};
use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};

use crate::api::error::ApiError;

/// No inline script and nothing from elsewhere. `style-src` allows inline styles only
/// because xterm.js inserts `<style>` elements (its viewport and DOM renderer).
pub const APP_CSP: &str =
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
     img-src 'self' data: blob:; connect-src 'self'; worker-src 'self'; manifest-src 'self'; \
     base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'";

const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// Everything without a hash in its name is revalidated on every use, so a new berth's app
/// shows at once; the ETag makes that a 304.
const REVALIDATE: &str = "no-cache";

/// GET and HEAD of one of the app's files.
pub async fn serve(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let path = match uri.path() {
        "/" => "index.html",
        other => other.trim_start_matches('/'),
    };
    let Some(file) = berth_webapp::file(path) else {
        return ApiError::NoRoute {
            method,
            path: uri.path().to_owned(),
        }
        .into_response();
    };
    let gzip = file.gzip.filter(|_| accepts_gzip(&headers));
    let etag = match gzip {
        // A different encoding is a different representation: its own strong tag.
        Some(_) => format!("{}-gz\"", file.etag.trim_end_matches('"')),
        None => file.etag.to_owned(),
    };
    let mut response = if matches(&headers, file, &etag) {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        let mut response = Response::new(Body::from(gzip.unwrap_or(file.bytes)));
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(file.content_type));
        if gzip.is_some() {
            response
                .headers_mut()
                .insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        response
    };
    let out = response.headers_mut();
    out.insert(
        CACHE_CONTROL,
        HeaderValue::from_static(if file.immutable {
            IMMUTABLE
        } else {
            REVALIDATE
        }),
    );
    if let Ok(value) = HeaderValue::from_str(&etag) {
        out.insert(ETAG, value);
    }
    out.insert(VARY, HeaderValue::from_static("Accept-Encoding"));
    out.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(APP_CSP));
    response
}

/// `If-None-Match` names this file's current version (either encoding's tag, or `*`).
fn matches(headers: &HeaderMap, file: &WebFile, etag: &str) -> bool {
    headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|tag| tag.trim().trim_start_matches("W/"))
        .any(|tag| tag == "*" || tag == etag || tag == file.etag)
}

/// Whether `Accept-Encoding` lists gzip (or `*`) with a non-zero quality.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(name: http::HeaderName, value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn gzip_is_accepted_unless_its_quality_is_zero() {
        assert!(accepts_gzip(&with(ACCEPT_ENCODING, "gzip, deflate, br")));
        assert!(accepts_gzip(&with(ACCEPT_ENCODING, "br;q=1.0, GZIP;q=0.5")));
        assert!(accepts_gzip(&with(ACCEPT_ENCODING, "*")));
        assert!(!accepts_gzip(&with(ACCEPT_ENCODING, "gzip;q=0, br")));
        assert!(!accepts_gzip(&with(ACCEPT_ENCODING, "identity")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }
}
