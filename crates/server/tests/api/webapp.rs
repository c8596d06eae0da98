//! The embedded web app over real HTTP: the shell revalidated with the app's CSP, hashed
//! assets cached for good, gzip negotiated, ETags answered with 304, unknown files 404 JSON.

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::Value;

use crate::harness::{error_code, TestServer};

async fn get(
    server: &TestServer,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, http::HeaderMap, Bytes) {
    server
        .raw(Method::GET, path, None, headers, Bytes::new())
        .await
}

fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .map(|v| v.to_str().unwrap())
        .unwrap_or_else(|| panic!("no {name} in {headers:?}"))
}

/// The app bundle's path, read from index.html as a browser would.
fn script_of(index: &str) -> String {
    let start = index
        .find("src=\"/assets/")
        .expect("a script in index.html")
        + 5;
    let end = index[start..].find('"').unwrap() + start;
    index[start..end].to_owned()
}

#[tokio::test]
async fn the_shell_is_served_without_a_key_with_the_app_csp_and_revalidated() {
    let server = TestServer::without_runtime().await;
    let (status, headers, body) = get(&server, "/", &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-type"), "text/html; charset=utf-8");
    assert_eq!(header(&headers, "cache-control"), "no-cache");
    let csp = header(&headers, "content-security-policy");
    assert!(
        csp.contains("script-src 'self';") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(!csp.contains("script-src 'self' 'unsafe"), "{csp}");
    let index = String::from_utf8(body.to_vec()).unwrap();
    assert!(
        index.contains("<script type=\"module\" src=\"/assets/"),
        "{index}"
    );
    assert!(!index.contains("<script>"), "no inline script: {index}");

    let (status, _, again) = get(&server, "/index.html", &[]).await;
    assert_eq!((status, again), (StatusCode::OK, body));
    for path in ["/sw.js", "/manifest.webmanifest", "/icons/icon-192.png"] {
        let (status, headers, _) = get(&server, path, &[]).await;
        assert_eq!(status, StatusCode::OK, "{path}");
        assert_eq!(header(&headers, "cache-control"), "no-cache", "{path}");
    }
}

#[tokio::test]
async fn hashed_assets_are_immutable_and_gzipped_when_accepted() {
    let server = TestServer::without_runtime().await;
    let (_, _, index) = get(&server, "/", &[]).await;
    let script = script_of(std::str::from_utf8(&index).unwrap());

    let (status, headers, plain) = get(&server, &script, &[]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        header(&headers, "cache-control"),
        "public, max-age=31536000, immutable"
    );
    assert_eq!(
        header(&headers, "content-type"),
        "text/javascript; charset=utf-8"
    );
    assert_eq!(header(&headers, "vary"), "Accept-Encoding");
    assert!(headers.get("content-encoding").is_none());

    let (status, headers, gz) = get(&server, &script, &[("accept-encoding", "br, gzip")]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "content-encoding"), "gzip");
    assert_eq!(header(&headers, "vary"), "Accept-Encoding");
    assert!(
        gz.len() < plain.len() / 2,
        "{} vs {}",
        gz.len(),
        plain.len()
    );
    assert_eq!(&gz[..2], [0x1f, 0x8b], "a gzip stream");
    let embedded = berth_webapp::file(script.trim_start_matches('/')).unwrap();
    assert_eq!((embedded.bytes, embedded.gzip), (&plain[..], Some(&gz[..])));

    let (_, headers, _) = get(&server, &script, &[("accept-encoding", "gzip;q=0")]).await;
    assert!(headers.get("content-encoding").is_none());
}

#[tokio::test]
async fn a_matching_etag_is_answered_with_304_and_a_stale_one_with_the_file() {
    let server = TestServer::without_runtime().await;
    let (_, headers, body) = get(&server, "/", &[]).await;
    let etag = header(&headers, "etag").to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");

    let (status, headers, empty) = get(&server, "/", &[("if-none-match", &etag)]).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(empty.is_empty());
    assert_eq!(header(&headers, "etag"), etag);
    assert_eq!(header(&headers, "cache-control"), "no-cache");

    let (status, _, again) = get(&server, "/", &[("if-none-match", "\"something-else\"")]).await;
    assert_eq!((status, again), (StatusCode::OK, body));

    let (status, headers, _) = server.raw(Method::HEAD, "/", None, &[], Bytes::new()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(header(&headers, "etag"), etag);
}

#[tokio::test]
async fn unknown_files_are_404_json_and_the_app_is_not_behind_the_api() {
    let server = TestServer::without_runtime().await;
    for path in [
        "/assets/app-NOPE.js",
        "/icons/../index.html",
        "/assets/",
        "/favicon.ico",
    ] {
        let (status, _, body) = get(&server, path, &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}");
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(error_code(&body), "not_found", "{path}");
    }
    // The API still wants its key.
    let (status, _, _) = get(&server, "/v1/boxes", &[]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}
