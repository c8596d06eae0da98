//! Headers every berth response carries: no MIME sniffing, no Referer (a pairing link or a
//! share token must not leak to another site), a Content-Security-Policy that allows
//! nothing unless the handler set its own (the web app's files and the ports proxy do),
//! and, over TLS, HSTS so a browser never downgrades to plain HTTP.
//!
//! Registered inside the ports host routing: an app on a port's own host name is another
//! origin and keeps its own headers.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY, X_CONTENT_TYPE_OPTIONS,
};
use http::HeaderValue;

use crate::tls::ServedOverTls;

/// What an API answer (JSON, an event stream) needs: nothing may load, nobody may frame it.
pub const DEFAULT_CSP: &str = "default-src 'none'; frame-ancestors 'none'";
/// One year, the figure browsers' preload lists ask for.
pub const HSTS: &str = "max-age=31536000";

pub async fn add(req: Request, next: Next) -> Response {
    let over_tls = req.extensions().get::<ServedOverTls>().is_some();
    let mut response = next.run(req).await;
    let headers = response.headers_mut();
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if !headers.contains_key(CONTENT_SECURITY_POLICY) {
        headers.insert(
            CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(DEFAULT_CSP),
        );
    }
    if over_tls {
        headers.insert(STRICT_TRANSPORT_SECURITY, HeaderValue::from_static(HSTS));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tower_service::Service as _;

    #[tokio::test]
    async fn a_handler_csp_is_kept_and_hsts_needs_tls() {
        const OWN: &str = "default-src 'self'";
        let mut app = axum::Router::new()
            .route(
                "/own",
                get(|| async { ([(CONTENT_SECURITY_POLICY, OWN)], "x") }),
            )
            .route("/plain", get(|| async { "x" }))
            .layer(axum::middleware::from_fn(add));
        let mut tls = Request::new(axum::body::Body::empty());
        *tls.uri_mut() = "/own".parse().unwrap();
        tls.extensions_mut().insert(ServedOverTls);
        let response = app.call(tls).await.unwrap();
        assert_eq!(response.headers()[CONTENT_SECURITY_POLICY], OWN);
        assert_eq!(response.headers()[STRICT_TRANSPORT_SECURITY], HSTS);
        assert_eq!(response.headers()[X_CONTENT_TYPE_OPTIONS], "nosniff");

        let mut plain = Request::new(axum::body::Body::empty());
        *plain.uri_mut() = "/plain".parse().unwrap();
        let response = app.call(plain).await.unwrap();
        assert_eq!(response.headers()[CONTENT_SECURITY_POLICY], DEFAULT_CSP);
        assert!(!response.headers().contains_key(STRICT_TRANSPORT_SECURITY));
    }
}
