//! Web sessions over real HTTP: pairing, signing in with a key, the `__Host-berth_session`
//! cookie on the API, Origin checks against cross-site requests, revocation and sign-out,
//! and the links the public URL (or the request's host) builds. The cookie at its edges is
//! `web_session_cookies.rs`'s.

use std::sync::Arc;
use std::time::Duration;

use berth_server::Runtimes;
use http::{Method, StatusCode};
use serde_json::json;

use crate::harness::{error_code, NoBoxes, TestServer};
use crate::web_session_fixtures::{
    as_browser, boxes_with, call, pairing, sign_in, try_sign_in, COOKIE, EVIL, OWN,
};

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
