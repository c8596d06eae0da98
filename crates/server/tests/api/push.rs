//! Web Push end to end: a local push service (an HTTP server on 127.0.0.1 in the test)
//! receives the daemon's pushes, checks their VAPID token against the daemon's key, and
//! decrypts them as a browser would, with an implementation independent of the daemon's
//! (RustCrypto's p256, hkdf and aes-gcm; the daemon uses ring).

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use berth_server::Runtimes;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;

use crate::end_to_end::sandbox;
use crate::harness::{error_code, NoBoxes, TestServer};
use crate::push_fixtures::{host_allowing, open_push, results, subscribe, Browser, PushService};
use crate::sse::open_sse;
use crate::talk::{post, until_result};

#[tokio::test]
async fn subscriptions_refuse_what_is_not_a_push_service_and_are_bounded() {
    let service = PushService::start().await;
    let server = TestServer::start_with_host(
        Runtimes::single(Arc::new(NoBoxes)),
        None,
        tempfile::tempdir().unwrap(),
        host_allowing(&service.origin()),
    )
    .await;
    let browser = Browser::new(format!("{}/push/phone", service.origin()));

    // The attacks first: a client must not make the daemon POST to its own host, the
    // host's private network, or anywhere but a push service.
    let daemon = server.addr;
    let other_port = service.addr.port().wrapping_add(1).max(1);
    for (endpoint, why) in [
        (format!("http://{daemon}/v1/boxes"), "https://"),
        (format!("https://{daemon}/v1/boxes"), "IP address"),
        (format!("http://127.0.0.1:{other_port}/push"), "https://"),
        ("https://127.0.0.1/push".into(), "IP address"),
        ("https://10.1.2.3/push".into(), "IP address"),
        (
            "https://169.254.169.254/latest/meta-data".into(),
            "IP address",
        ),
        ("https://[::1]/push".into(), "IP address"),
        ("https://localhost/push".into(), "not a known push service"),
        (
            "https://push.example.com/push".into(),
            "not a known push service",
        ),
        (
            "https://fcm.googleapis.com.attacker.example/x".into(),
            "not a known push service",
        ),
        ("http://fcm.googleapis.com/fcm/send/x".into(), "https://"),
        (
            "https://fcm.googleapis.com:8443/fcm/send/x".into(),
            "port 443",
        ),
        ("file:///etc/passwd".into(), "not an http(s) URL"),
        (
            format!("https://fcm.googleapis.com/{}", "a".repeat(2100)),
            "2048 bytes",
        ),
    ] {
        let mut body = browser.subscription();
        body["endpoint"] = json!(endpoint);
        let (status, answer) = subscribe(&server, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{endpoint}: {answer}");
        assert_eq!(error_code(&answer), "invalid_request", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(why), "{endpoint}: {message}");
    }

    // Bad keys, each named.
    let mut off_curve = browser.public();
    off_curve[64] ^= 1;
    for (field, value, why) in [
        ("p256dh", "not base64!".to_owned(), "base64url"),
        ("p256dh", URL_SAFE_NO_PAD.encode([4u8; 33]), "65 bytes"),
        (
            "p256dh",
            URL_SAFE_NO_PAD.encode(&off_curve),
            "not a point on P-256",
        ),
        ("auth", URL_SAFE_NO_PAD.encode([1u8; 8]), "16 bytes"),
        ("auth", "***".to_owned(), "base64url"),
    ] {
        let mut body = browser.subscription();
        body["keys"][field] = json!(value);
        let (status, answer) = subscribe(&server, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}={value}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(field) && message.contains(why),
            "{message}"
        );
    }
    let (status, answer) = subscribe(&server, json!({"endpoint": browser.endpoint})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(server
        .call(Method::GET, "/v1/web/push/subscriptions", None)
        .await
        .1["subscriptions"]
        .as_array()
        .unwrap()
        .is_empty());

    // Known push services and the allowed origin pass; the same endpoint is the same id.
    let (status, first) = subscribe(&server, browser.subscription()).await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert!(first["id"].as_str().unwrap().starts_with("ps_"));
    assert_eq!(first["endpoint_host"], "127.0.0.1");
    let (status, again) = subscribe(&server, browser.subscription()).await;
    assert_eq!((status, &again["id"]), (StatusCode::CREATED, &first["id"]));
    let mut fcm = browser.subscription();
    fcm["endpoint"] = json!("https://fcm.googleapis.com/fcm/send/abc:def");
    let (status, answer) = subscribe(&server, fcm).await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(answer["endpoint_host"], "fcm.googleapis.com");

    // 20 per tenant: the 21st is refused, saying so.
    for n in 2..20 {
        let mut body = browser.subscription();
        body["endpoint"] = json!(format!(
            "https://updates.push.services.mozilla.com/wpush/v2/{n}"
        ));
        let (status, answer) = subscribe(&server, body).await;
        assert_eq!(status, StatusCode::CREATED, "{n}: {answer}");
    }
    let mut body = browser.subscription();
    body["endpoint"] = json!("https://web.push.apple.com/twenty-first");
    let (status, answer) = subscribe(&server, body).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 20 push subscriptions"),
        "{answer}"
    );

    let (status, list) = server
        .call(Method::GET, "/v1/web/push/subscriptions", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let subscriptions = list["subscriptions"].as_array().unwrap();
    assert_eq!(subscriptions.len(), 20);
    assert!(
        !list.to_string().contains("/push/phone"),
        "listings never show an endpoint: {list}"
    );
    let path = format!(
        "/v1/web/push/subscriptions/{}",
        first["id"].as_str().unwrap()
    );
    let (status, _) = server.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, answer) = server.call(Method::DELETE, &path, None).await;
    assert_eq!(
        (status, error_code(&answer)),
        (StatusCode::NOT_FOUND, "not_found")
    );

    // The key browsers subscribe with: an uncompressed P-256 point.
    let (status, key) = server.call(Method::GET, "/v1/web/push/key", None).await;
    assert_eq!(status, StatusCode::OK);
    let point = URL_SAFE_NO_PAD
        .decode(key["public_key"].as_str().unwrap())
        .unwrap();
    assert!(point.len() == 65 && point[0] == 4);
    let (status, _, _) = server
        .raw(Method::GET, "/v1/web/push/key", None, &[], Bytes::new())
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// The texts of box `name`'s ended turns (its `result` events), oldest first.
#[tokio::test]
async fn a_turn_nobody_watches_is_pushed_encrypted_and_a_gone_subscription_is_deleted() {
    let mut service = PushService::start().await;
    let data = tempfile::tempdir().unwrap();
    let runtime = match sandbox(data.path()) {
        Ok(runtime) => runtime,
        Err(reason) => {
            berth_testkit::skip("sandbox", &reason);
            return;
        }
    };
    let mut server = TestServer::start_with_host(
        Runtimes::single(runtime),
        Some("runc".into()),
        data,
        host_allowing(&service.origin()),
    )
    .await;
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "pushy", "template": "echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (_, key) = server.call(Method::GET, "/v1/web/push/key", None).await;
    let vapid_public = key["public_key"].as_str().unwrap().to_owned();
    let phone = Browser::new(format!("{}/push/phone", service.origin()));
    let gone = Browser::new(format!("{}/push/gone", service.origin()));
    let flaky = Browser::new(format!("{}/push/flaky", service.origin()));
    for browser in [&phone, &gone, &flaky] {
        let (status, answer) = subscribe(&server, browser.subscription()).await;
        assert_eq!(status, StatusCode::CREATED, "{answer}");
    }

    // A turn with no stream open: one push to each subscription, and the one the service
    // answered 503 once more after its Retry-After. The answer is longer than a
    // notification shows.
    let long = "4".repeat(200);
    post(&server, "pushy", &format!("remember {long}")).await;
    let (mut to_phone, mut to_gone, mut to_flaky) = (Vec::new(), 0, Vec::new());
    while to_phone.is_empty() || to_gone == 0 || to_flaky.len() < 2 {
        let push = service.next().await;
        let origin = service.origin();
        match push.path.as_str() {
            "/push/phone" => to_phone.push(open_push(&push, &phone, &vapid_public, &origin)),
            "/push/flaky" => to_flaky.push(open_push(&push, &flaky, &vapid_public, &origin)),
            "/push/gone" => {
                open_push(&push, &gone, &vapid_public, &origin);
                to_gone += 1;
            }
            other => panic!("a push to {other}"),
        }
    }
    assert_eq!(
        to_flaky[0], to_flaky[1],
        "the retry is the same notification"
    );
    assert_eq!(to_flaky[0], to_phone[0]);
    let answer = results(&server, "pushy").await.pop().unwrap_or_default();
    assert!(answer.starts_with("OK, I will remember 4444"), "{answer}");
    let expected: String = answer.chars().take(140).collect();
    assert_eq!(
        to_phone[0],
        json!({"title": "pushy", "body": expected, "url": "/#/boxes/pushy/chat", "box": "pushy"})
    );

    // The service answered 410 for `gone`: the daemon deletes that subscription.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, list) = server
            .call(Method::GET, "/v1/web/push/subscriptions", None)
            .await;
        let hosts = list["subscriptions"].as_array().unwrap().len();
        if hosts == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the gone subscription stays: {list}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A turn while an event stream is open: the screen shows it, no push.
    let (_, page) = server
        .call(Method::GET, "/v1/boxes/pushy/events?wait=false", None)
        .await;
    let after = page["next_after"].to_string();
    let (status, mut sse) = open_sse(
        &server,
        "/v1/boxes/pushy/events",
        &[("last-event-id", &after)],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    post(&server, "pushy", "watched turn").await;
    let seen = until_result(&mut sse).await;
    let watched = seen.last().unwrap().data["data"]["result"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(watched, "echo: watched turn");
    let mut watched_results = results(&server, "pushy").await.len();
    // The daemon notices a closed stream at its next write to it: turns may end watched
    // until then. Each turn is posted after the last one's end, so the first push after
    // this is the first turn after the daemon noticed.
    drop(sse);
    let mut turn = 0;
    let pushed = loop {
        turn += 1;
        post(&server, "pushy", &format!("unwatched turn {turn}")).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while results(&server, "pushy").await.len() == watched_results {
            assert!(Instant::now() < deadline, "turn {turn} never ended");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        watched_results += 1;
        if let Ok(push) = service.received.try_recv() {
            break push;
        }
        if turn == 5 {
            // By now the stream is long closed: this turn's push must come.
            break service.next().await;
        }
    };
    // Pushes are sent in order: had the watched turn been pushed, its push would be the
    // first one to arrive after the first turn's.
    let mut later = vec![pushed];
    while let Ok(push) = service.received.try_recv() {
        later.push(push);
    }
    for push in &later {
        let browser = match push.path.as_str() {
            "/push/phone" => &phone,
            "/push/flaky" => &flaky,
            other => panic!("a push to {other}: the gone subscription gets nothing more"),
        };
        let opened = open_push(push, browser, &vapid_public, &service.origin());
        let body = opened["body"].as_str().unwrap();
        assert!(body.starts_with("echo: unwatched turn "), "{opened}");
    }
    assert_eq!(to_phone.len(), 1, "one push for the first turn");
    eprintln!("push: the daemon noticed the closed stream by unwatched turn {turn}");
    server.shut_down().await;
}
