//! What the web session tests share: berth's own origin and a hostile one, the cookie's
//! names, calls made as a browser (with or without a cookie and an Origin), pairing and
//! signing in, and a session row as an older berth left it.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::Value;

use crate::harness::TestServer;

/// The harness's requests name `Host: berth`: berth's own origin is then this.
pub(crate) const OWN: &str = "http://berth";
pub(crate) const EVIL: &str = "https://evil.example";
/// The session cookie: `__Host-` makes the browser refuse it unless it is host-only,
/// `Path=/` and `Secure`, so no other host (a box's port host) can set it.
pub(crate) const COOKIE: &str = "__Host-berth_session";
/// Its name before issue 20, still taken for sessions made before the upgrade.
pub(crate) const OLD_COOKIE: &str = "berth_session";

pub(crate) async fn call(
    server: &TestServer,
    method: Method,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, HeaderMap, Value) {
    let body = body.map(|v| Bytes::from(v.to_string())).unwrap_or_default();
    let (status, headers, bytes) = server.raw(method, path, key, headers, body).await;
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("not JSON ({e}): {bytes:?}"))
    };
    (status, headers, value)
}

/// A browser's call: its cookie, and the page's origin if any.
pub(crate) async fn as_browser(
    server: &TestServer,
    method: Method,
    path: &str,
    cookie: &str,
    origin: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, HeaderMap, Value) {
    let mut headers = vec![("cookie", cookie)];
    headers.extend(origin.map(|o| ("origin", o)));
    call(server, method, path, None, &headers, body).await
}

/// A sign-in with no key and no cookie.
pub(crate) async fn try_sign_in(
    server: &TestServer,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, Value) {
    let (status, _, answer) = sign_in_call(server, headers, body).await;
    (status, answer)
}

pub(crate) async fn sign_in_call(
    server: &TestServer,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, HeaderMap, Value) {
    call(
        server,
        Method::POST,
        "/v1/web/sessions",
        None,
        headers,
        Some(body),
    )
    .await
}

/// A pairing code made with the admin key.
pub(crate) async fn pairing(server: &TestServer, body: Value) -> Value {
    let (status, headers, made) = call(
        server,
        Method::POST,
        "/v1/web/pairings",
        Some(&server.key),
        &[],
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    assert_eq!(headers["cache-control"], "no-store");
    made
}

/// Signs in; the answer and the `Cookie` header value to send back.
pub(crate) async fn sign_in(
    server: &TestServer,
    body: Value,
    headers: &[(&str, &str)],
) -> (Value, String) {
    let (status, answer_headers, session) = sign_in_call(server, headers, body).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let set = answer_headers["set-cookie"].to_str().unwrap();
    let (pair, flags) = set.split_once("; ").unwrap();
    assert_eq!(
        flags, "HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=34560000",
        "{set}"
    );
    let token = pair.strip_prefix(&format!("{COOKIE}=")).unwrap();
    assert!(token.starts_with("bws_") && token.len() == 4 + 64, "{set}");
    (session, pair.to_owned())
}

pub(crate) async fn boxes_with(server: &TestServer, cookie: &str) -> StatusCode {
    as_browser(server, Method::GET, "/v1/boxes", cookie, None, None)
        .await
        .0
}

/// What migration 15 did to every session that existed before it.
pub(crate) fn made_before_the_upgrade(server: &TestServer, id: &str) {
    let db = rusqlite::Connection::open(server.data.path().join("berth.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE web_sessions SET legacy_cookie = 1 WHERE id = ?1",
            [id],
        )
        .unwrap();
    assert_eq!(changed, 1);
}
