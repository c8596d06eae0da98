//! Issue 20's session fixation through the ports proxy, on a real sandbox box: a box's app
//! answering with `Set-Cookie` must never reach berth's own cookies. By path (berth's own
//! origin) no app cookie reaches the browser at all; at a port's host name, one naming
//! `Domain=` or named like berth's is dropped; a `101` is filtered too. Several share-link
//! cookies (an app's page script can add one with a more specific path) are each tried.

use futures_util::{SinkExt, StreamExt};
use http::{Method, StatusCode};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

use crate::harness::set_cookies;
use crate::ports::{
    cookie_of, get, make_link, path_of, serving, with_cookie, APP_PORT, BASE_DOMAIN,
};

/// What the app tries to set: berth's names in every spelling a browser would take, a
/// nameless cookie whose value reads as berth's, cookies for the parent domain, and two
/// cookies of its own.
const PLANTED: &[&str] = &[
    "berth_session=bws_planted; Path=/v1/",
    "__Host-berth_session=bws_planted; Path=/; Secure",
    "BERTH_PORT=bps_planted; Path=/",
    "__secure-Berth_Session=bws_planted; Secure; Path=/",
    " berth_port =bps_planted; Path=/",
    "=berth_session=bws_nameless; Path=/",
    "sid=1; Domain=boxes.test; Path=/",
    "lang=en; path=/; DOMAIN=.boxes.test",
    "theme=dark; Path=/",
    "cart=3",
];
/// What an app may keep at its own host name.
const ITS_OWN: &[&str] = &["theme=dark; Path=/", "cart=3"];

fn query() -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(PLANTED.iter().map(|c| ("c", *c)))
        .finish()
}

#[tokio::test]
async fn ports_an_apps_set_cookie_never_reaches_berths_cookies() {
    let Some(server) = serving(30).await else {
        return;
    };
    let addr = server.addr;
    let bearer = format!("Bearer {}", server.key);
    let auth = [("authorization", bearer.as_str())];
    let query = query();

    // By path, under berth's own origin: not one cookie, and no Clear-Site-Data (which
    // would sign the browser out of berth).
    let path = format!("/v1/boxes/web/ports/{APP_PORT}/set-cookie?{query}&clear=1");
    let (status, headers, body) = get(addr, "berth", &path, &auth).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    assert_eq!(set_cookies(&headers), Vec::<String>::new(), "by path");
    assert!(!headers.contains_key("clear-site-data"), "{headers:?}");

    // At the port's own host name: the app keeps its own cookies, nothing else.
    let host = format!("{APP_PORT}-web.{BASE_DOMAIN}:{}", addr.port());
    let (status, headers, _) = get(addr, &host, &format!("/set-cookie?{query}"), &auth).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(set_cookies(&headers), ITS_OWN, "by host name");

    // A WebSocket's 101 is an answer too.
    let url = format!("ws://{addr}/v1/boxes/web/ports/{APP_PORT}/ws?{query}");
    let mut request = url.into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", bearer.parse().unwrap());
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut ws, response) = tokio_tungstenite::client_async(request, tcp)
        .await
        .expect("the app's WebSocket through berth");
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(set_cookies(response.headers()), Vec::<String>::new(), "101");
    ws.send(Message::Text("still echoes".into())).await.unwrap();
    match ws.next().await.expect("an echo").unwrap() {
        Message::Text(text) => assert_eq!(text.as_str(), "still echoes"),
        other => panic!("not the echo: {other:?}"),
    }
    ws.close(None).await.ok();
}

#[tokio::test]
async fn ports_several_share_link_cookies_are_each_tried() {
    let Some(server) = serving(30).await else {
        return;
    };
    let addr = server.addr;
    let (status, link) = make_link(&server, 600).await;
    assert_eq!(status, StatusCode::CREATED, "{link}");
    let (status, headers, _) =
        get(addr, "berth", path_of(link["url"].as_str().unwrap()), &[]).await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let good = cookie_of(&headers);
    let page = format!("/v1/boxes/web/ports/{APP_PORT}/headers");

    // Page script can set a cookie of the same name with a more specific path, which the
    // browser sends first: a forged one, or another live link's (for another port).
    let other = server
        .call(
            Method::POST,
            "/v1/boxes/web/ports/8000/links",
            Some(serde_json::json!({"ttl_s": 600})),
        )
        .await
        .1;
    let (_, headers, _) = get(addr, "berth", path_of(other["url"].as_str().unwrap()), &[]).await;
    let elsewhere = cookie_of(&headers);
    for first in ["berth_port=bps_forged".to_owned(), elsewhere.clone()] {
        let status = with_cookie(addr, &page, &format!("{first}; {good}")).await;
        assert_eq!(status, StatusCode::OK, "with {first} first");
    }
    // Each cookie is a store lookup: only the first few are tried.
    let many = vec!["berth_port=bps_forged"; 16].join("; ");
    let status = with_cookie(addr, &page, &format!("{many}; {good}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Alone, the other port's cookie still opens nothing here.
    assert_eq!(
        with_cookie(addr, &page, &elsewhere).await,
        StatusCode::FORBIDDEN
    );
}

/// A browser signed in as another tenant opens a share link: the link's cookie decides
/// where its tenant has no box of that name. Where it has one, its own box is served: a
/// link never shadows it (an app posing as the user's own).
#[tokio::test]
async fn ports_a_signed_in_browser_opens_another_tenants_share_link() {
    let Some(server) = serving(3).await else {
        return;
    };
    let addr = server.addr;
    let page = format!("/v1/boxes/web/ports/{APP_PORT}/headers");
    // The app answers the key first: it listens.
    let bearer = format!("Bearer {}", server.key);
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    while get(addr, "berth", &page, &[("authorization", &bearer)])
        .await
        .0
        != StatusCode::OK
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the app never answered"
        );
    }
    let (_, other) = server
        .call(
            Method::POST,
            "/v1/tenants",
            Some(serde_json::json!({"name": "other"})),
        )
        .await;
    let other_key = other["api_key"].as_str().unwrap();
    let (status, headers, body) = server
        .raw(
            Method::POST,
            "/v1/web/sessions",
            None,
            &[("content-type", "application/json")],
            serde_json::json!({"api_key": other_key}).to_string().into(),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    let session = cookie_of(&headers);

    let (_, link) = make_link(&server, 600).await;
    let (_, headers, _) = get(addr, "berth", path_of(link["url"].as_str().unwrap()), &[]).await;
    let both = format!("{}; {session}", cookie_of(&headers));
    assert_eq!(with_cookie(addr, &page, &both).await, StatusCode::OK);

    // Now the other tenant has a box named `web` of its own (nothing listens in it).
    let (status, _, body) = server
        .raw(
            Method::POST,
            "/v1/boxes",
            Some(other_key),
            &[],
            serde_json::json!({"name": "web"}).to_string().into(),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    let (status, _, body) = get(addr, "berth", &page, &[("cookie", &both)]).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body:?}");
}
