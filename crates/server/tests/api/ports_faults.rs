//! Apps that misbehave behind the ports proxy, on real sandbox boxes (the app of
//! `fixtures/port_app.py`): one that never begins its answer is cut at `[ports]
//! answer_timeout_s` with a `504` and holds its tenant's slot no longer; one that answers
//! `101` to a request that asked for no upgrade gets its client a `502`, not a hung
//! connection; and an app behind berth's own TLS is told `X-Forwarded-Proto: https`.

use std::time::{Duration, Instant};

use berth_server::config::TlsConfig;
use berth_server::{HostConfig, Runtimes};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;

use crate::end_to_end::sandbox;
use crate::harness::{error_code, TestServer};
use crate::ports::{app_headers, get, header, json_of, serving_with, APP, APP_PORT};
use crate::tls::{install, request_tls, TestCa};

/// How long a client waits for the proxy before calling it a hang.
const HANG: Duration = Duration::from_secs(60);

/// `GET /v1/boxes/web/ports/8001{path}` with the key: the status, the answer (JSON, else
/// its text), and how long it took; a panic when the proxy does not answer within [`HANG`].
async fn app_get(server: &TestServer, path: &str) -> (StatusCode, serde_json::Value, Duration) {
    let bearer = format!("Bearer {}", server.key);
    let url = format!("/v1/boxes/web/ports/{APP_PORT}{path}");
    let began = Instant::now();
    let (status, _, body) = tokio::time::timeout(
        HANG,
        get(server.addr, "berth", &url, &[("authorization", &bearer)]),
    )
    .await
    .unwrap_or_else(|_| panic!("GET {url}: no answer from the proxy within {HANG:?}"));
    let body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned().into());
    (status, body, began.elapsed())
}

#[tokio::test]
async fn an_app_that_never_answers_is_cut_with_a_504_and_frees_its_slot() {
    const ANSWER_TIMEOUT_S: u64 = 3;
    let Some(server) = serving_with(|ports| {
        ports.max_connections_per_tenant = 1;
        ports.answer_timeout_s = ANSWER_TIMEOUT_S;
    })
    .await
    else {
        return;
    };
    // The baseline: an answer from the app, and what it is told over plain HTTP.
    let (status, seen, baseline) = app_get(&server, "/headers").await;
    assert_eq!(status, StatusCode::OK, "{seen}");
    assert_eq!(
        header(&app_headers(&seen), "x-forwarded-proto"),
        Some("http")
    );

    let (status, body, took) = app_get(&server, "/stall").await;
    eprintln!("an app answering at once: {baseline:?}; one that never answers: cut after {took:?} (answer_timeout_s = {ANSWER_TIMEOUT_S})");
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(error_code(&body), "timeout", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("port {APP_PORT}")) && message.contains("answer_timeout_s"),
        "{message}"
    );
    assert!(
        took >= Duration::from_secs(ANSWER_TIMEOUT_S),
        "cut before the deadline: {took:?}"
    );
    assert!(
        took < Duration::from_secs(ANSWER_TIMEOUT_S) + baseline + Duration::from_secs(10),
        "cut long after the deadline: {took:?}"
    );

    // The tenant's one slot is free again: the next request is served at once.
    let (status, seen, _) = app_get(&server, "/headers").await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the stuck request kept its slot: {seen}"
    );
}

#[tokio::test]
async fn a_101_to_a_request_that_asked_no_upgrade_is_a_502() {
    let Some(server) = serving_with(|ports| ports.max_connections_per_tenant = 1).await else {
        return;
    };
    let (status, body, _) = app_get(&server, "/switch").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(error_code(&body), "unavailable", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("101"), "{message}");
    // Nothing of that exchange is held: the tenant's one slot serves the next request.
    let (status, seen, _) = app_get(&server, "/headers").await;
    assert_eq!(status, StatusCode::OK, "{seen}");
}

#[tokio::test]
async fn an_app_behind_berths_tls_is_told_the_client_came_over_https() {
    let data = tempfile::tempdir().unwrap();
    let Ok(runtime) = sandbox(data.path()).map_err(|why| berth_testkit::skip("sandbox", &why))
    else {
        return;
    };
    let ca = TestCa::new();
    let (cert_pem, key_pem, _) = ca.leaf();
    let files = tempfile::tempdir().unwrap();
    let (cert, key) = install(files.path(), &cert_pem, &key_pem);
    let server = TestServer::start_configured(
        Runtimes::single(runtime),
        Some("runc".into()),
        data,
        HostConfig::default(),
        |config| config.tls = Some(TlsConfig::Files { cert, key }),
    )
    .await;
    let ca = ca.der();
    let call = |method: Method, path: String, body: Option<serde_json::Value>| {
        let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let (addr, ca, key) = (server.addr, ca.clone(), server.key.clone());
        async move { request_tls(addr, &ca, method, &path, &key, body).await }
    };
    let (status, body) = call(
        Method::POST,
        "/v1/boxes".into(),
        Some(json!({"name": "web"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    let port = APP_PORT.to_string();
    let started = json!({"cmd": ["python3", "-c", APP, port], "background": true});
    let (status, body) = call(Method::POST, "/v1/boxes/web/exec".into(), Some(started)).await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");

    let path = format!("/v1/boxes/web/ports/{APP_PORT}/headers");
    let (status, body) = call(Method::GET, path, None).await;
    assert_eq!(status, StatusCode::OK, "{body:?}");
    let seen = app_headers(&json_of(&body));
    assert_eq!(
        header(&seen, "x-forwarded-proto"),
        Some("https"),
        "{seen:?}"
    );
}
