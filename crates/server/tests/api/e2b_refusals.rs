//! E2B requests that berth refuses, each in E2B's error shape: bodies that do not parse or
//! are too large, fields berth cannot honour, unknown routes and endpoints, a reused
//! idempotency key, a pause the runtime cannot do.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::e2b_control::e2b_server;
use crate::e2b_control::{assert_error, create, e2b, info};
use crate::fake::FakeRuntime;
use crate::harness::{request, TestServer};

#[tokio::test]
async fn bad_requests_get_e2b_shaped_errors() {
    let (server, _fake) = e2b_server().await;
    let raw = |body: Bytes| {
        let key = server.key.clone();
        async move {
            let (status, _, answer) = request(
                server.addr,
                Method::POST,
                "/e2b/v2/sandboxes",
                None,
                &[("x-api-key", &key), ("content-type", "application/json")],
                body,
            )
            .await;
            (status, serde_json::from_slice::<Value>(&answer).unwrap())
        }
    };
    let (status, body) = raw(Bytes::from_static(b"{\"templateID\":")).await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "EOF");
    let (status, body) = raw(Bytes::from(vec![b' '; 2 * 1024 * 1024])).await;
    assert_error(status, &body, StatusCode::PAYLOAD_TOO_LARGE, "limit");
    let cases = [
        (
            json!({"templateID": "base", "colour": "red"}),
            StatusCode::BAD_REQUEST,
            "unknown field `colour`",
        ),
        (json!({"timeout": 5}), StatusCode::BAD_REQUEST, "templateID"),
        (
            json!({"templateID": "base", "timeout": 86_401}),
            StatusCode::BAD_REQUEST,
            "24 hours",
        ),
        (
            json!({"templateID": "base", "mcp": {"github": {}}}),
            StatusCode::BAD_REQUEST,
            "`mcp`",
        ),
        (
            json!({"templateID": "base", "volumeMounts": [{"name": "v", "path": "/v"}]}),
            StatusCode::BAD_REQUEST,
            "volumeMounts",
        ),
        (
            json!({"templateID": "base", "network": {"allowOut": ["8.8.8.8"], "denyOut": ["0.0.0.0/0"]}}),
            StatusCode::BAD_REQUEST,
            "allowOut",
        ),
        (
            json!({"templateID": "base", "metadata": {"": "x"}}),
            StatusCode::BAD_REQUEST,
            "metadata",
        ),
        (
            json!({"templateID": "base", "envVars": {"A=B": "x"}}),
            StatusCode::BAD_REQUEST,
            "A=B",
        ),
    ];
    for (body, expected, needle) in cases {
        let (status, answer) = raw(Bytes::from(body.to_string())).await;
        assert_error(status, &answer, expected, needle);
    }
    let (status, list) = e2b(&server, Method::GET, "/v2/sandboxes", None).await;
    assert_eq!(
        (status, list),
        (StatusCode::OK, json!([])),
        "nothing was made"
    );

    let (status, body) = e2b(&server, Method::GET, "/nope", None).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "/e2b/nope");
    let (status, body) = e2b(&server, Method::PATCH, "/sandboxes", None).await;
    assert_error(status, &body, StatusCode::METHOD_NOT_ALLOWED, "PATCH");
    let (status, body) = e2b(&server, Method::POST, "/sandboxes/x/fork", None).await;
    assert_error(status, &body, StatusCode::NOT_IMPLEMENTED, "fork");
    let (status, body) = e2b(
        &server,
        Method::POST,
        "/sandboxes/x/timeout",
        Some(json!({})),
    )
    .await;
    assert_error(status, &body, StatusCode::BAD_REQUEST, "timeout");
}

#[tokio::test]
async fn an_idempotency_key_makes_one_sandbox() {
    let (server, _fake) = e2b_server().await;
    let post = |body: Value, key: &'static str| {
        let api_key = server.key.clone();
        async move {
            let (status, _, answer) = request(
                server.addr,
                Method::POST,
                "/e2b/v2/sandboxes",
                None,
                &[("x-api-key", &api_key), ("idempotency-key", key)],
                Bytes::from(body.to_string()),
            )
            .await;
            (status, serde_json::from_slice::<Value>(&answer).unwrap())
        }
    };
    let body = json!({"templateID": "base", "metadata": {"run": "1"}});
    let (status, first) = post(body.clone(), "run-1").await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    let (status, again) = post(body.clone(), "run-1").await;
    assert_eq!(status, StatusCode::CREATED, "{again}");
    assert_eq!(again["sandboxID"], first["sandboxID"]);
    let (status, other) = post(json!({"templateID": "base"}), "run-1").await;
    assert_error(status, &other, StatusCode::UNPROCESSABLE_ENTITY, "run-1");
    assert_eq!(other["error_code"], "idempotency_request_mismatch");
    let (status, bad) = post(body, "Not_A_Key").await;
    assert_error(status, &bad, StatusCode::BAD_REQUEST, "Idempotency-Key");
    let (_, list) = e2b(&server, Method::GET, "/v2/sandboxes", None).await;
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
}

/// On a runtime that cannot pause, a pause that keeps the processes is refused as such
/// (501), never answered as "already paused" (409, which the SDK reads as done).
#[tokio::test]
async fn a_runtime_that_cannot_pause_says_so() {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    let server = TestServer::start(fake, None, data).await;
    let (status, body) = e2b(
        &server,
        Method::POST,
        "/v2/sandboxes",
        Some(json!({"templateID": "base", "autoPause": true})),
    )
    .await;
    assert_error(status, &body, StatusCode::NOT_IMPLEMENTED, "cannot pause");
    let created = create(&server, json!({"templateID": "base"})).await;
    let id = created["sandboxID"].as_str().unwrap();
    let (status, body) = e2b(
        &server,
        Method::POST,
        &format!("/sandboxes/{id}/pause"),
        None,
    )
    .await;
    assert_error(status, &body, StatusCode::NOT_IMPLEMENTED, "memory false");
    let (status, _) = e2b(
        &server,
        Method::POST,
        &format!("/sandboxes/{id}/pause"),
        Some(json!({"memory": false})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "only the disk: a stop");
    let (_, detail) = info(&server, id).await;
    assert_eq!(detail["pauseMode"], "filesystem", "{detail}");
}
