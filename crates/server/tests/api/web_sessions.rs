//! Web sessions over real HTTP: pairing, signing in with a key, the `__Host-berth_session`
//! cookie on the API, Origin checks against cross-site requests, revocation and sign-out,
//! two session cookies refused, a browser signed in before the cookie's rename kept signed
//! in; and on a real sandbox box, the cookie kept from a box's app and the app's pages
//! sandboxed, and a cross-origin terminal WebSocket refused.

use std::sync::Arc;
use std::time::Duration;

use berth_server::Runtimes;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::end_to_end::sandbox;
use crate::harness::{error_code, set_cookies, NoBoxes, TestServer};

/// The harness's requests name `Host: berth`: berth's own origin is then this.
const OWN: &str = "http://berth";
const EVIL: &str = "https://evil.example";
/// The session cookie: `__Host-` makes the browser refuse it unless it is host-only,
/// `Path=/` and `Secure`, so no other host (a box's port host) can set it.
const COOKIE: &str = "__Host-berth_session";
/// Its name before issue 20, still taken for sessions made before the upgrade.
const OLD_COOKIE: &str = "berth_session";

async fn call(
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
async fn as_browser(
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
async fn try_sign_in(
    server: &TestServer,
    headers: &[(&str, &str)],
    body: Value,
) -> (StatusCode, Value) {
    let (status, _, answer) = sign_in_call(server, headers, body).await;
    (status, answer)
}

async fn sign_in_call(
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
async fn pairing(server: &TestServer, body: Value) -> Value {
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
async fn sign_in(server: &TestServer, body: Value, headers: &[(&str, &str)]) -> (Value, String) {
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

async fn boxes_with(server: &TestServer, cookie: &str) -> StatusCode {
    as_browser(server, Method::GET, "/v1/boxes", cookie, None, None)
        .await
        .0
}

#[tokio::test]
async fn a_pairing_link_signs_one_browser_in_once() {
    let server = TestServer::without_runtime().await;
    let made = pairing(&server, json!({})).await;
    let code = made["code"].as_str().unwrap();
    assert!(code.starts_with("bwp_") && code.len() == 4 + 64, "{made}");
    // The code rides in the fragment: never sent to a server, never in a log or Referer.
    assert_eq!(made["url"], format!("{OWN}/#/pair/{code}"));
    let expires: time::OffsetDateTime = time::OffsetDateTime::parse(
        made["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = expires - time::OffsetDateTime::now_utc();
    assert!(left > time::Duration::minutes(9) && left <= time::Duration::minutes(10));

    let android = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36";
    let (session, cookie) = sign_in(
        &server,
        json!({"pairing_code": code}),
        &[("origin", OWN), ("user-agent", android)],
    )
    .await;
    assert!(session["id"].as_str().unwrap().starts_with("ws_"));
    assert_eq!(session["tenant"], "default");
    assert_eq!(session["device"], "Chrome on Android");
    assert_eq!(boxes_with(&server, &cookie).await, StatusCode::OK);

    // One use: the same code again, from anywhere, opens nothing.
    let (status, body) = try_sign_in(&server, &[], json!({"pairing_code": code})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert_eq!(error_code(&body), "unauthorized");

    // This browser's session, and the tenant's list, with device and last use.
    let (status, _, me) =
        as_browser(&server, Method::GET, "/v1/web/session", &cookie, None, None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["id"], session["id"]);
    assert!(me["last_used_at"].is_string() && me["created_at"].is_string());
    let (status, list) = server.call(Method::GET, "/v1/web/sessions", None).await;
    assert_eq!(status, StatusCode::OK);
    let listed = &list["sessions"][0];
    assert_eq!(
        (&listed["id"], &listed["device"]),
        (&session["id"], &session["device"])
    );
    assert!(listed["last_used_at"].is_string());
    // With a key, there is no "this browser".
    let (status, _) = server.call(Method::GET, "/v1/web/session", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_pairing_code_expires() {
    let server = TestServer::without_runtime().await;
    let (status, body) = server
        .call(Method::POST, "/v1/web/pairings", Some(json!({"ttl_s": 5})))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let made = pairing(&server, json!({"ttl_s": 10})).await;
    let expires = time::OffsetDateTime::parse(
        made["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    // The condition is the clock passing the expiry (a try would use the code up).
    while time::OffsetDateTime::now_utc() <= expires {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = try_sign_in(&server, &[], json!({"pairing_code": made["code"]})).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
}

#[tokio::test]
async fn an_api_key_signs_in_and_a_wrong_one_is_refused() {
    let server = TestServer::without_runtime().await;
    let (session, cookie) = sign_in(
        &server,
        json!({"api_key": server.key, "device": "my laptop"}),
        &[],
    )
    .await;
    assert_eq!(session["device"], "my laptop");
    assert_eq!(boxes_with(&server, &cookie).await, StatusCode::OK);

    for bad in [
        json!({"api_key": "berth_0000"}),
        json!({"api_key": ""}),
        json!({"pairing_code": "bwp_00"}),
    ] {
        let (status, body) = try_sign_in(&server, &[], bad).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        assert_eq!(error_code(&body), "unauthorized");
        assert!(body["error"]["message"].is_string());
    }
    for malformed in [json!({}), json!({"api_key": "x", "pairing_code": "y"})] {
        let (status, body) = try_sign_in(&server, &[], malformed).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
    // Login CSRF: another site cannot sign this browser in as someone else.
    let (status, body) =
        try_sign_in(&server, &[("origin", EVIL)], json!({"api_key": server.key})).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "bad_origin");
}

#[tokio::test]
async fn cookie_writes_need_berths_origin_and_a_session_is_never_admin() {
    let server = TestServer::without_runtime().await;
    let (session, cookie) = sign_in(&server, json!({"api_key": server.key}), &[]).await;
    let create = |name: &str| Some(json!({ "name": name }));

    for origin in [
        Some(EVIL),
        Some("null"),
        Some("http://berth.evil.example"),
        None,
    ] {
        let (status, _, body) = as_browser(
            &server,
            Method::POST,
            "/v1/boxes",
            &cookie,
            origin,
            create("a"),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{origin:?}: {body}");
        assert_eq!(error_code(&body), "bad_origin");
    }
    let (status, boxes) = server.call(Method::GET, "/v1/boxes", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(boxes["boxes"].as_array().unwrap().len(), 0, "{boxes}");

    let (status, _, body) = as_browser(
        &server,
        Method::POST,
        "/v1/boxes",
        &cookie,
        Some(OWN),
        create("a"),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // Never admin, even signed in with the admin key.
    let (status, _, body) = as_browser(
        &server,
        Method::POST,
        "/v1/tenants",
        &cookie,
        Some(OWN),
        Some(json!({"name": "other"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "permission_denied");
    // Nor does it mint or list API keys, even its own tenant's: a key would outlive the
    // session's revocation.
    let keys = format!("/v1/tenants/{}/keys", session["tenant"].as_str().unwrap());
    for method in [Method::POST, Method::GET] {
        let (status, _, body) =
            as_browser(&server, method, &keys, &cookie, Some(OWN), Some(json!({}))).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
        assert_eq!(error_code(&body), "permission_denied");
    }
    // Nor does a browser mint pairing codes.
    let (status, _, _) = as_browser(
        &server,
        Method::POST,
        "/v1/web/pairings",
        &cookie,
        Some(OWN),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn revoking_or_signing_out_ends_the_cookie_at_once() {
    let server = TestServer::without_runtime().await;
    let (first, first_cookie) = sign_in(&server, json!({"api_key": server.key}), &[]).await;
    let (_, second_cookie) = sign_in(&server, json!({"api_key": server.key}), &[]).await;

    let path = format!("/v1/web/sessions/{}", first["id"].as_str().unwrap());
    let (status, _) = server.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        boxes_with(&server, &first_cookie).await,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(boxes_with(&server, &second_cookie).await, StatusCode::OK);
    let (status, body) = server.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // Sign out: from another site refused; from berth's own page, done and cleared.
    let (status, _, _) = as_browser(
        &server,
        Method::DELETE,
        "/v1/web/session",
        &second_cookie,
        Some(EVIL),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, headers, _) = as_browser(
        &server,
        Method::DELETE,
        "/v1/web/session",
        &second_cookie,
        Some(OWN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let cleared = headers["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with(&format!("{COOKIE}=;")) && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    assert_eq!(
        boxes_with(&server, &second_cookie).await,
        StatusCode::UNAUTHORIZED
    );
    let (_, list) = server.call(Method::GET, "/v1/web/sessions", None).await;
    assert_eq!(list["sessions"], json!([]));
}

#[tokio::test]
async fn the_public_url_builds_links_and_counts_as_berths_origin() {
    let server = TestServer::start_configured(
        Runtimes::single(Arc::new(NoBoxes)),
        None,
        tempfile::tempdir().unwrap(),
        Default::default(),
        |config| config.public_url = Some("https://berth.example.com".parse().unwrap()),
    )
    .await;
    let made = pairing(&server, json!({})).await;
    assert_eq!(
        made["url"],
        format!(
            "https://berth.example.com/#/pair/{}",
            made["code"].as_str().unwrap()
        )
    );
    let (_, cookie) = sign_in(
        &server,
        json!({"pairing_code": made["code"]}),
        &[("origin", "https://berth.example.com")],
    )
    .await;
    let (status, _, body) = as_browser(
        &server,
        Method::POST,
        "/v1/boxes",
        &cookie,
        Some("https://berth.example.com"),
        Some(json!({"name": "a"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn without_a_public_url_links_follow_the_host_and_a_tls_proxy() {
    let server = TestServer::without_runtime().await;
    let (status, _, made) = call(
        &server,
        Method::POST,
        "/v1/web/pairings",
        Some(&server.key),
        &[("x-forwarded-proto", "https")],
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert!(
        made["url"]
            .as_str()
            .unwrap()
            .starts_with("https://berth/#/pair/bwp_"),
        "{made}"
    );
}

/// Two session cookies: a box's app (or a page on a sibling host) planted one. Berth cannot
/// tell which is the user's, so it serves neither: `400` naming why and the way out, on
/// every call that reads the session (the API, this browser's session, the ports proxy),
/// and the answer expires the old name wherever it could have been set. Signing out still
/// works, and ends the user's own session.
#[tokio::test]
async fn two_session_cookies_are_refused_naming_why_and_the_way_out() {
    let server = TestServer::without_runtime().await;
    let (mine, my_cookie) = sign_in(&server, json!({"api_key": server.key}), &[]).await;
    let (status, other) = server
        .call(Method::POST, "/v1/tenants", Some(json!({"name": "other"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    let (_, their_cookie) = sign_in(&server, json!({"api_key": other["api_key"]}), &[]).await;
    let theirs = their_cookie.split_once('=').unwrap().1;
    let planted = format!("{OLD_COOKIE}={theirs}");

    for cookies in [
        // A planted cookie with a longer path is sent first.
        format!("{planted}; {my_cookie}"),
        format!("{my_cookie}; {planted}"),
        format!("{OLD_COOKIE}=bws_00; {planted}"),
        format!("{my_cookie}; {COOKIE}=bws_00"),
    ] {
        // Each path, and every path a cookie sent with it can have been set on.
        for (path, cookie_paths) in [
            ("/v1/boxes", &["/", "/v1", "/v1/", "/v1/boxes"][..]),
            (
                "/v1/web/session",
                &["/", "/v1", "/v1/", "/v1/web", "/v1/web/", "/v1/web/session"],
            ),
            (
                "/v1/boxes/web/ports/8000/",
                &["/", "/v1/", "/v1/boxes/", "/v1/boxes/web/ports/8000/"],
            ),
        ] {
            let (status, headers, body) =
                as_browser(&server, Method::GET, path, &cookies, None, None).await;
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "{path} with {cookies}: {body}"
            );
            assert_eq!(error_code(&body), "duplicate_session_cookie", "{body}");
            let message = body["error"]["message"].as_str().unwrap();
            for words in [
                "2 berth session cookies",
                "sign out",
                "clear this site's cookies",
            ] {
                assert!(message.contains(words), "{words:?} not in {message:?}");
            }
            let set = set_cookies(&headers);
            if cookies
                .split("; ")
                .any(|c| c.starts_with(&format!("{OLD_COOKIE}=")))
            {
                for p in cookie_paths {
                    let expired = format!("{OLD_COOKIE}=; Path={p}; Max-Age=0");
                    assert!(
                        set.iter().any(|c| c.starts_with(&expired)),
                        "{expired:?} not in {set:?}"
                    );
                }
            }
            // The user's own (new-name) cookie is never expired by the refusal.
            assert!(!set.iter().any(|c| c.starts_with(COOKIE)), "{set:?}");
        }
    }
    // An API key is the caller whatever the cookies.
    let (status, _, _) = call(
        &server,
        Method::GET,
        "/v1/boxes",
        Some(&server.key),
        &[("cookie", &format!("{planted}; {my_cookie}"))],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    // The way out: sign out, from berth's own page, ends this browser's own session and
    // clears both names.
    let both = format!("{planted}; {my_cookie}");
    let (status, headers, body) = as_browser(
        &server,
        Method::DELETE,
        "/v1/web/session",
        &both,
        Some(EVIL),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert!(set_cookies(&headers).iter().all(|c| !c.starts_with(COOKIE)));
    let (status, headers, body) = as_browser(
        &server,
        Method::DELETE,
        "/v1/web/session",
        &both,
        Some(OWN),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let set = set_cookies(&headers);
    assert!(
        set.iter()
            .any(|c| c.starts_with(&format!("{COOKIE}=;")) && c.contains("Max-Age=0")),
        "{set:?}"
    );
    assert_eq!(
        boxes_with(&server, &my_cookie).await,
        StatusCode::UNAUTHORIZED
    );
    let (_, list) = server.call(Method::GET, "/v1/web/sessions", None).await;
    assert!(
        !list.to_string().contains(mine["id"].as_str().unwrap()),
        "{list}"
    );
}

/// What migration 15 did to every session that existed before it.
fn made_before_the_upgrade(server: &TestServer, id: &str) {
    let db = rusqlite::Connection::open(server.data.path().join("berth.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE web_sessions SET legacy_cookie = 1 WHERE id = ?1",
            [id],
        )
        .unwrap();
    assert_eq!(changed, 1);
}

/// A browser signed in before the rename keeps its session: its old cookie is taken (for a
/// session from before the upgrade only) and the answer moves it to the new name. Parallel
/// requests with the old name are all served; once the new name is seen, the old one is
/// over for that session. A session made after the upgrade is never taken by the old name.
#[tokio::test]
async fn a_browser_signed_in_before_the_rename_stays_signed_in_under_the_new_name() {
    let server = TestServer::without_runtime().await;
    let (session, cookie) = sign_in(&server, json!({"api_key": server.key}), &[]).await;
    let token = cookie.split_once('=').unwrap().1.to_owned();
    let old = format!("{OLD_COOKIE}={token}");

    let (status, headers, _) =
        as_browser(&server, Method::GET, "/v1/boxes", &old, None, None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "a new session under the old name"
    );
    assert!(
        set_cookies(&headers)
            .iter()
            .any(|c| c.starts_with(&format!("{OLD_COOKIE}=; Path=/; Max-Age=0"))),
        "{headers:?}"
    );

    made_before_the_upgrade(&server, session["id"].as_str().unwrap());
    let upgraded =
        format!("{COOKIE}={token}; HttpOnly; Secure; SameSite=Strict; Path=/; Max-Age=34560000");
    let requests = (0..4).map(|_| as_browser(&server, Method::GET, "/v1/boxes", &old, None, None));
    for (status, headers, body) in futures_util::future::join_all(requests).await {
        assert_eq!(status, StatusCode::OK, "{body}");
        let set = set_cookies(&headers);
        assert!(set.contains(&upgraded), "{set:?}");
        assert!(
            set.iter()
                .any(|c| c.starts_with(&format!("{OLD_COOKIE}=; Path=/; Max-Age=0"))),
            "{set:?}"
        );
    }
    // A sign-in or sign-out decides the new cookie itself: the old one's upgrade does not
    // overwrite it.
    let (status, headers, body) =
        sign_in_call(&server, &[("cookie", &old)], json!({"api_key": server.key})).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let news: Vec<String> = set_cookies(&headers)
        .into_iter()
        .filter(|c| c.starts_with(COOKIE))
        .collect();
    assert_eq!(news.len(), 1, "{news:?}");
    assert!(!news[0].contains(&token), "{news:?}");

    // The browser shows the new name: served, told nothing more, and the old name is over.
    let (status, headers, me) =
        as_browser(&server, Method::GET, "/v1/web/session", &cookie, None, None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["id"], session["id"]);
    assert_eq!(set_cookies(&headers), Vec::<String>::new());
    let (status, _, _) = as_browser(&server, Method::GET, "/v1/boxes", &old, None, None).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the old name after the new one"
    );
    assert_eq!(boxes_with(&server, &cookie).await, StatusCode::OK);
}

/// The attack on the port proxy: a box's app, reached by path under berth's own origin
/// with a signed-in browser's cookie, must never see the cookie, and its page must never
/// run in berth's origin (where its script could call the API as the user). And a
/// terminal WebSocket opened from another site with the cookie is refused.
#[tokio::test]
async fn a_boxs_app_never_gets_the_cookie_nor_berths_origin() {
    let data = tempfile::tempdir().unwrap();
    let runtime = match sandbox(data.path()) {
        Ok(runtime) => runtime,
        Err(reason) => {
            berth_testkit::skip("sandbox", &reason);
            return;
        }
    };
    let server = TestServer::start_with(Runtimes::single(runtime), Some("runc".into()), data).await;
    let (status, body) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "web"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    // An app that shows what cookies reached it, and sets a policy of its own.
    let app = r#"import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ('cookie=' + (self.headers.get('Cookie') or '')).encode()
        self.send_response(200)
        self.send_header('Content-Security-Policy', "default-src *; script-src * 'unsafe-inline'")
        self.send_header('Content-Type', 'text/html')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(('127.0.0.1', 8000), H).serve_forever()
"#;
    let (status, _, body) = server
        .raw(
            Method::PUT,
            "/v1/boxes/web/files?path=/home/user/app.py",
            Some(&server.key),
            &[],
            Bytes::from(app),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body:?}");
    let (status, started) = server
        .call(
            Method::POST,
            "/v1/boxes/web/exec",
            Some(json!({"cmd": ["python3", "/home/user/app.py"], "background": true})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");

    let (_, session_cookie) = sign_in(&server, json!({"api_key": server.key}), &[]).await;
    let cookies = format!("theme=dark; {session_cookie}");
    // The proxy waits for the app to listen (`[ports] listen_wait_s`).
    let (status, headers, page) = server
        .raw(
            Method::GET,
            "/v1/boxes/web/ports/8000/",
            None,
            &[("cookie", &cookies)],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{page:?}");
    assert_eq!(String::from_utf8_lossy(&page), "cookie=theme=dark");
    let policies: Vec<_> = headers
        .get_all("content-security-policy")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        policies,
        ["sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"]
    );
    // The key's way in gets the same sandbox: the page is under berth's origin either way.
    let (status, headers, _) = server
        .raw(
            Method::GET,
            "/v1/boxes/web/ports/8000/",
            Some(&server.key),
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(headers["content-security-policy"]
        .to_str()
        .unwrap()
        .starts_with("sandbox "));

    // A terminal WebSocket with the cookie: from another site (or no site) refused.
    let pty = |origin: Option<&'static str>| {
        let (addr, cookie) = (server.addr, session_cookie.clone());
        async move {
            let url = format!("ws://{addr}/v1/boxes/web/pty");
            let mut request = url.into_client_request().unwrap();
            request
                .headers_mut()
                .insert("cookie", cookie.parse().unwrap());
            if let Some(origin) = origin {
                let origin = if origin == "own" {
                    format!("http://{addr}")
                } else {
                    origin.into()
                };
                request
                    .headers_mut()
                    .insert("origin", origin.parse().unwrap());
            }
            let tcp = TcpStream::connect(addr).await.unwrap();
            match tokio_tungstenite::client_async(request, tcp).await {
                Ok((socket, response)) => Ok((socket, response.status().as_u16())),
                Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err((
                    response.status().as_u16(),
                    String::from_utf8_lossy(response.body().as_deref().unwrap_or_default())
                        .into_owned(),
                )),
                Err(e) => panic!("WebSocket connect: {e}"),
            }
        }
    };
    for origin in [Some(EVIL), None] {
        match pty(origin).await {
            Err((status, body)) => {
                assert_eq!(status, 403, "{body}");
                assert!(body.contains("bad_origin"), "{body}");
            }
            Ok(_) => panic!("a cross-origin terminal opened ({origin:?})"),
        }
    }
    let (mut socket, status) = pty(Some("own"))
        .await
        .expect("a same-origin terminal opens");
    assert_eq!(status, 101);
    socket.close(None).await.ok();
}
