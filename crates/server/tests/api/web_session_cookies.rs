//! The web session cookie at its edges: two session cookies refused, a browser signed in
//! before the cookie's rename kept signed in; and on a real sandbox box, the cookie kept
//! from a box's app and the app's pages sandboxed, and a cross-origin terminal WebSocket
//! refused.

use berth_server::Runtimes;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::end_to_end::sandbox;
use crate::harness::{error_code, set_cookies, TestServer};
use crate::web_session_fixtures::{
    as_browser, boxes_with, call, made_before_the_upgrade, sign_in, sign_in_call, COOKIE, EVIL,
    OLD_COOKIE, OWN,
};

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
