//! Share links of a box's port: opened without the key, stopped by expiry and revocation
//! (the fixtures are `ports.rs`'s).

use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::json;

use crate::harness::error_code;
use crate::ports::{
    app_headers, cookie_of, get, header, json_of, make_link, path_of, serving, with_cookie,
};

#[tokio::test]
async fn ports_share_links_open_without_the_key_and_stop_at_expiry_or_revocation() {
    let Some(server) = serving(30).await else {
        return;
    };
    let addr = server.addr;
    let (status, body) = make_link(&server, 5).await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request"),
        "{body}"
    );
    let (status, link) = make_link(&server, 10).await;
    assert_eq!(status, StatusCode::CREATED, "{link}");
    let url = link["url"].as_str().unwrap();
    assert!(url.contains("?berth_link=bpl_"), "{link}");
    assert!(!url.contains(&server.key));

    // Attacks first: no key and no link; a forged cookie; the link on another port.
    let (status, _, body) = get(addr, "berth", "/v1/boxes/web/ports/8001/headers", &[]).await;
    assert_eq!(
        (status, error_code(&json_of(&body))),
        (StatusCode::UNAUTHORIZED, "unauthorized")
    );
    let (status, headers, body) = get(
        addr,
        "berth",
        "/v1/boxes/web/ports/8001/headers",
        &[("accept", "text/html")],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    assert!(String::from_utf8_lossy(&body).contains("share link"));
    let (status, _, _) = get(
        addr,
        "berth",
        "/v1/boxes/web/ports/8001/headers",
        &[("cookie", "berth_port=bps_00")],
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let token = url.split("berth_link=").nth(1).unwrap();
    let (status, _, body) = get(
        addr,
        "berth",
        &format!("/v1/boxes/web/ports/8000/?berth_link={token}"),
        &[],
    )
    .await;
    assert_eq!(
        (status, error_code(&json_of(&body))),
        (StatusCode::FORBIDDEN, "permission_denied")
    );

    // The link: a redirect without the token, and a cookie for this port's path only.
    let (status, headers, _) = get(addr, "berth", path_of(url), &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(headers["location"], "/v1/boxes/web/ports/8001/");
    let set_cookie = headers["set-cookie"].to_str().unwrap();
    for part in ["HttpOnly", "SameSite=Lax", "Path=/v1/boxes/web/ports/8001/"] {
        assert!(set_cookie.contains(part), "{set_cookie}");
    }
    let max_age: i64 = set_cookie
        .split("Max-Age=")
        .nth(1)
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=10).contains(&max_age), "{set_cookie}");
    let cookie = cookie_of(&headers);
    assert!(
        !cookie.contains(token),
        "the link's token is not the cookie's"
    );
    let cookies = format!("{cookie}; theme=dark");
    let (status, _, body) = get(
        addr,
        "berth",
        "/v1/boxes/web/ports/8001/headers",
        &[("cookie", &cookies)],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let seen = app_headers(&json_of(&body));
    assert_eq!(header(&seen, "cookie"), Some("theme=dark"), "{seen:?}");
    // The cookie opens only its own port.
    let status = with_cookie(addr, "/v1/boxes/web/ports/8000/hi.txt", &cookie).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Another tenant cannot see the box, nor use the link on a box of its own name.
    let (status, other) = server
        .call(Method::POST, "/v1/tenants", Some(json!({"name": "other"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    let other_key = format!("Bearer {}", other["api_key"].as_str().unwrap());
    let (status, _, _) = get(
        addr,
        "berth",
        "/v1/boxes/web/ports/8001/headers",
        &[("authorization", &other_key)],
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // A second link, revoked: its URL and its cookie stop at once.
    let (_, second) = make_link(&server, 3600).await;
    let (status, headers, _) =
        get(addr, "berth", path_of(second["url"].as_str().unwrap()), &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let second_cookie = cookie_of(&headers);
    let status = with_cookie(addr, "/v1/boxes/web/ports/8001/headers", &second_cookie).await;
    assert_eq!(status, StatusCode::OK);
    let (status, revoked) = server
        .call(
            Method::DELETE,
            &format!(
                "/v1/boxes/web/ports/8001/links/{}",
                second["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(
        (status, &revoked["state"]),
        (StatusCode::OK, &json!("revoked"))
    );
    let status = with_cookie(addr, "/v1/boxes/web/ports/8001/headers", &second_cookie).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) = get(addr, "berth", path_of(second["url"].as_str().unwrap()), &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body:?}");
    assert!(String::from_utf8_lossy(&body).contains("revoked"));

    // Listings show no token.
    let (status, list) = server.call(Method::GET, "/v1/boxes/web/links", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["links"].as_array().unwrap().len(), 2, "{list}");
    assert!(!list.to_string().contains("bpl_"), "{list}");

    // Past the first link's expiry, its URL and its cookie open nothing.
    let expires = time::OffsetDateTime::parse(
        link["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let left = expires - time::OffsetDateTime::now_utc();
    // Waiting for the clock to pass the expiry: the condition is time itself.
    tokio::time::sleep(
        Duration::from_secs_f64(left.as_seconds_f64().max(0.0)) + Duration::from_millis(1100),
    )
    .await;
    let status = with_cookie(addr, "/v1/boxes/web/ports/8001/headers", &cookie).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) = get(addr, "berth", path_of(url), &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(
        String::from_utf8_lossy(&body).contains("expired"),
        "{body:?}"
    );
}
