//! E2B's control plane under `/e2b` against a fake runtime that pauses: every endpoint's
//! answer and errors in E2B's shape, auth by `X-API-KEY`, a tenant seeing only its own
//! sandboxes, and a sandbox being a berth box.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{json, Value};

use crate::fake::FakeRuntime;
use crate::harness::{request, TestServer};

/// A daemon on a fake runtime that pauses boxes.
pub async fn e2b_server() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::pausing(data.path().to_owned()));
    (TestServer::start(fake.clone(), None, data).await, fake)
}

/// One E2B call with `key` in `X-API-KEY` (`None`: no key); the answer's status, headers
/// and body (`Null` when empty).
pub async fn e2b_as(
    server: &TestServer,
    key: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, HeaderMap, Value) {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(key) = key {
        headers.push(("x-api-key", key));
    }
    let body = body.map(|v| Bytes::from(v.to_string())).unwrap_or_default();
    let (status, headers, bytes) = request(
        server.addr,
        method,
        &format!("/e2b{path}"),
        None,
        &headers,
        body,
    )
    .await;
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&bytes)))
    };
    (status, headers, value)
}

/// [`e2b_as`] with the server's admin key.
pub async fn e2b(
    server: &TestServer,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, body) = e2b_as(server, Some(&server.key), method, path, body).await;
    (status, body)
}

/// E2B's `Error`: `code` is the status, `message` says why.
pub fn assert_error(status: StatusCode, body: &Value, expected: StatusCode, needle: &str) {
    assert_eq!(status, expected, "{body}");
    assert_eq!(body["code"], expected.as_u16(), "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains(needle), "{needle:?} not in {body}");
}

/// Creates a sandbox through `POST /v2/sandboxes`; its `Sandbox` answer.
pub async fn create(server: &TestServer, body: Value) -> Value {
    let (status, created) = e2b(server, Method::POST, "/v2/sandboxes", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    created
}

/// `POST /v2/sandboxes/{id}/connect` with `timeout_s`.
pub async fn connect(server: &TestServer, id: &str, timeout_s: u64) -> (StatusCode, Value) {
    let path = format!("/v2/sandboxes/{id}/connect");
    e2b(
        server,
        Method::POST,
        &path,
        Some(json!({"timeout": timeout_s})),
    )
    .await
}

/// `echo hi` in the sandbox's box through berth's own API: the status.
pub async fn exec_in(server: &TestServer, id: &str) -> (StatusCode, Value) {
    let body = json!({"cmd": ["echo", "hi"]});
    let path = format!("/v1/boxes/{id}/exec");
    server.call(Method::POST, &path, Some(body)).await
}

/// The sandbox's `SandboxDetail`, or the error answer.
pub async fn info(server: &TestServer, id: &str) -> (StatusCode, Value) {
    e2b(server, Method::GET, &format!("/sandboxes/{id}"), None).await
}

/// Polls the sandbox's info until `done` holds for (status, body); fails after a minute.
pub async fn wait_info(
    server: &TestServer,
    id: &str,
    what: &str,
    done: impl Fn(StatusCode, &Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = info(server, id).await;
        if done(status, &body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{id}: still not {what}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn rfc3339_ms(text: &Value) -> i64 {
    let t = time::OffsetDateTime::parse(
        text.as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// A sandbox's id and access token.
pub async fn sandbox(server: &TestServer) -> (String, String) {
    let created = create(server, json!({"templateID": "base", "timeout": 600})).await;
    let id = created["sandboxID"].as_str().unwrap().to_owned();
    let token = created["envdAccessToken"].as_str().unwrap().to_owned();
    (id, token)
}

/// An envd call under `/e2b` for sandbox `id` with `token` (`None`: without one).
pub async fn envd(
    server: &TestServer,
    method: Method,
    path: &str,
    id: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    body: Bytes,
) -> (StatusCode, http::HeaderMap, Bytes) {
    let mut headers = vec![("e2b-sandbox-id", id)];
    if let Some(token) = token {
        headers.push(("x-access-token", token));
    }
    headers.extend_from_slice(extra);
    request(
        server.addr,
        method,
        &format!("/e2b{path}"),
        None,
        &headers,
        body,
    )
    .await
}

#[tokio::test]
async fn a_sandbox_is_a_running_berth_box_until_killed() {
    let (server, _fake) = e2b_server().await;
    let created = create(
        &server,
        json!({"templateID": "base", "timeout": 600, "metadata": {"user": "ada"},
               "envVars": {"GREETING": "hello"}}),
    )
    .await;
    let id = created["sandboxID"].as_str().unwrap().to_owned();
    assert_eq!(id.len(), 20, "{created}");
    assert!(
        id.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
        "{id}"
    );
    assert_eq!(created["templateID"], "base");
    assert_eq!(created["clientID"], "berth");
    assert_eq!(created["envdVersion"], "0.5.7");
    assert_eq!(created["domain"], Value::Null);
    let token = created["envdAccessToken"].as_str().unwrap();
    assert_eq!(token.len(), 64, "{created}");

    // The box: named by the sandbox id, labelled, with the sandbox's env, running, and
    // berth's idle ladder off.
    let (status, boxed) = server
        .call(Method::GET, &format!("/v1/boxes/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{boxed}");
    assert_eq!(boxed["state"], "running");
    assert_eq!(boxed["labels"], json!({"e2b": "true"}));
    assert_eq!(boxed["env"], json!({"GREETING": "hello"}));
    assert_eq!(
        boxed["template"], "host",
        "base is berth's default template"
    );
    assert_eq!(
        (
            &boxed["pause_after_s"],
            &boxed["snapshot_after_s"],
            &boxed["stop_after_s"]
        ),
        (&json!(0), &json!(0), &json!(0))
    );

    let (status, detail) = info(&server, &id).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    assert_eq!(detail["sandboxID"], id.as_str());
    assert_eq!(detail["state"], "running");
    assert_eq!(detail["metadata"], json!({"user": "ada"}));
    assert_eq!(detail["envdAccessToken"], token);
    assert_eq!(
        detail["lifecycle"],
        json!({"autoResume": false, "onTimeout": "kill"})
    );
    assert_eq!(detail["memoryMB"], boxed["limits"]["memory_mib"]);
    assert!(detail["cpuCount"].as_u64().unwrap() >= 1, "{detail}");
    assert!(detail["diskSizeMB"].as_u64().unwrap() > 0, "{detail}");
    let lifetime = rfc3339_ms(&detail["endAt"]) - rfc3339_ms(&detail["startedAt"]);
    assert!((599_000..=601_000).contains(&lifetime), "{detail}");

    // Each sandbox its own token.
    let other = create(&server, json!({"templateID": "base"})).await;
    assert_ne!(other["envdAccessToken"], created["envdAccessToken"]);

    let (status, body) = e2b(&server, Method::DELETE, &format!("/sandboxes/{id}"), None).await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    let (status, body) = info(&server, &id).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, &id);
    let (status, _) = server
        .call(Method::GET, &format!("/v1/boxes/{id}"), None)
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "the box went with the sandbox"
    );
    let (status, body) = e2b(&server, Method::DELETE, &format!("/sandboxes/{id}"), None).await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "not found");
}

#[tokio::test]
async fn the_v1_create_defaults_to_fifteen_seconds_and_a_berth_template_is_taken_by_name() {
    let (server, _fake) = e2b_server().await;
    let (status, created) = e2b(
        &server,
        Method::POST,
        "/sandboxes",
        Some(json!({"templateID": "host", "secure": false})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["templateID"], "host");
    assert_eq!(
        created["envdAccessToken"].as_str().map(str::len),
        Some(64),
        "a token even when secure is false"
    );
    let (_, detail) = info(&server, created["sandboxID"].as_str().unwrap()).await;
    let lifetime = rfc3339_ms(&detail["endAt"]) - rfc3339_ms(&detail["startedAt"]);
    assert!((14_000..=16_000).contains(&lifetime), "{detail}");

    let (status, body) = e2b(
        &server,
        Method::POST,
        "/v2/sandboxes",
        Some(json!({"templateID": "ubuntu-22"})),
    )
    .await;
    assert_error(status, &body, StatusCode::NOT_FOUND, "ubuntu-22");
    assert!(
        body["message"].as_str().unwrap().contains("base, "),
        "{body}"
    );
}

#[tokio::test]
async fn only_a_berth_api_key_in_x_api_key_opens_the_api() {
    let (server, _fake) = e2b_server().await;
    let bearer = format!("Bearer {}", server.key);
    for (what, headers) in [
        ("no key", vec![]),
        ("a wrong key", vec![("x-api-key", "e2b_not_a_berth_key")]),
        ("an empty key", vec![("x-api-key", "")]),
        (
            "berth's own header",
            vec![("authorization", bearer.as_str())],
        ),
    ] {
        let (status, _, body) = request(
            server.addr,
            Method::GET,
            "/e2b/v2/sandboxes",
            None,
            &headers,
            Bytes::new(),
        )
        .await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_error(status, &body, StatusCode::UNAUTHORIZED, "X-API-KEY");
        let _ = what;
    }
    // Health needs no key, as E2B's.
    let (status, _, _) = e2b_as(&server, None, Method::GET, "/health", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn another_tenant_finds_none_of_my_sandboxes() {
    let (server, _fake) = e2b_server().await;
    let mine = create(
        &server,
        json!({"templateID": "base", "metadata": {"a": "b"}}),
    )
    .await;
    let id = mine["sandboxID"].as_str().unwrap();
    let (status, other) = server
        .call(Method::POST, "/v1/tenants", Some(json!({"name": "other"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{other}");
    let key = other["api_key"].as_str().unwrap();
    let calls = [
        (Method::GET, format!("/sandboxes/{id}"), None),
        (Method::DELETE, format!("/sandboxes/{id}"), None),
        (Method::GET, format!("/sandboxes/{id}/metrics"), None),
        (Method::POST, format!("/sandboxes/{id}/pause"), None),
        (Method::POST, format!("/sandboxes/{id}/resume"), None),
        (
            Method::POST,
            format!("/sandboxes/{id}/timeout"),
            Some(json!({"timeout": 5})),
        ),
        (
            Method::POST,
            format!("/v2/sandboxes/{id}/connect"),
            Some(json!({"timeout": 5})),
        ),
        (
            Method::POST,
            format!("/sandboxes/{id}/connect"),
            Some(json!({"timeout": 5})),
        ),
    ];
    for (method, path, body) in calls {
        let (status, _, answer) = e2b_as(&server, Some(key), method.clone(), &path, body).await;
        assert_error(status, &answer, StatusCode::NOT_FOUND, "not found");
        let _ = (method, path);
    }
    for path in [
        "/v2/sandboxes",
        "/sandboxes",
        "/v2/sandboxes?metadata=a%3Db",
    ] {
        let (status, _, list) = e2b_as(&server, Some(key), Method::GET, path, None).await;
        assert_eq!((status, list), (StatusCode::OK, json!([])), "{path}");
    }
    let (status, _, metrics) = e2b_as(
        &server,
        Some(key),
        Method::GET,
        &format!("/sandboxes/metrics?sandbox_ids={id}"),
        None,
    )
    .await;
    assert_eq!(
        (status, metrics),
        (StatusCode::OK, json!({"sandboxes": {}}))
    );
    // Still mine, still running.
    let (status, detail) = info(&server, id).await;
    assert_eq!(
        (status, &detail["state"]),
        (StatusCode::OK, &json!("running"))
    );
}

#[tokio::test]
async fn pause_then_connect_brings_the_same_box_back_and_timeouts_follow_e2b() {
    let (server, _fake) = e2b_server().await;
    let created = create(&server, json!({"templateID": "base", "timeout": 300})).await;
    let id = created["sandboxID"].as_str().unwrap();
    let path = |verb: &str| format!("/sandboxes/{id}/{verb}");

    // set_timeout moves endAt either way, within 0..=24h.
    let (status, _) = e2b(
        &server,
        Method::POST,
        &path("timeout"),
        Some(json!({"timeout": 1000})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, detail) = info(&server, id).await;
    let left = rfc3339_ms(&detail["endAt"]) - crate::e2b_control::now_ms();
    assert!((990_000..=1_001_000).contains(&left), "{detail}");
    for bad in [json!({"timeout": 86_401}), json!({"timeout": -1})] {
        let (status, body) = e2b(&server, Method::POST, &path("timeout"), Some(bad)).await;
        assert_error(status, &body, StatusCode::BAD_REQUEST, "24 hours");
    }

    // Connecting to a running sandbox answers 200 and never shortens its timeout.
    let (status, again) = connect(&server, id, 10).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["envdAccessToken"], created["envdAccessToken"]);
    let (_, after) = info(&server, id).await;
    assert_eq!(after["endAt"], detail["endAt"], "only extended");

    assert_eq!(count(&server, id).await, 1);
    let (status, body) = e2b(&server, Method::POST, &path("pause"), None).await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    let (_, paused) = info(&server, id).await;
    assert_eq!(
        (&paused["state"], &paused["pauseMode"]),
        (&json!("paused"), &json!("full"))
    );
    let (_, boxed) = server
        .call(Method::GET, &format!("/v1/boxes/{id}"), None)
        .await;
    assert_eq!(boxed["state"], "paused", "berth's pause: {boxed}");
    let (status, body) = e2b(&server, Method::POST, &path("pause"), None).await;
    assert_error(status, &body, StatusCode::CONFLICT, "already paused");
    let (status, body) = e2b(
        &server,
        Method::POST,
        &path("timeout"),
        Some(json!({"timeout": 5})),
    )
    .await;
    assert_error(status, &body, StatusCode::CONFLICT, "connect");
    let (status, samples) = e2b(&server, Method::GET, &path("metrics"), None).await;
    assert_eq!(
        (status, samples),
        (StatusCode::OK, json!([])),
        "no sample while paused"
    );

    let (status, resumed) = connect(&server, id, 60).await;
    assert_eq!(status, StatusCode::CREATED, "{resumed}");
    assert_eq!(resumed["sandboxID"], id);
    let (_, running) = info(&server, id).await;
    assert_eq!(running["state"], "running");
    assert_eq!(count(&server, id).await, 2, "the box's memory was kept");

    // A pause that keeps only the disk stops the box; v1 resume brings it back, and
    // refuses a running one.
    let (status, _) = e2b(
        &server,
        Method::POST,
        &path("pause"),
        Some(json!({"memory": false})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, stopped) = info(&server, id).await;
    assert_eq!(
        (&stopped["state"], &stopped["pauseMode"]),
        (&json!("paused"), &json!("filesystem"))
    );
    let (status, resumed) = e2b(
        &server,
        Method::POST,
        &path("resume"),
        Some(json!({"timeout": 30})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{resumed}");
    assert_eq!(
        count(&server, id).await,
        1,
        "a cold boot: only the disk was kept"
    );
    let (status, body) = e2b(&server, Method::POST, &path("resume"), Some(json!({}))).await;
    assert_error(status, &body, StatusCode::CONFLICT, "already running");

    // Metrics of a running sandbox: one sample now, from the box's limits and volume.
    let (status, samples) = e2b(&server, Method::GET, &path("metrics"), None).await;
    assert_eq!(status, StatusCode::OK, "{samples}");
    let sample = &samples[0];
    assert_eq!(samples.as_array().unwrap().len(), 1, "{samples}");
    assert_eq!(
        sample["memTotal"],
        running["memoryMB"].as_u64().unwrap() << 20
    );
    assert_eq!(sample["cpuCount"], running["cpuCount"]);
    let (status, many) = e2b(
        &server,
        Method::GET,
        &format!("/sandboxes/metrics?sandbox_ids={id},nosuchsandbox"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{many}");
    assert_eq!(many["sandboxes"].as_object().unwrap().len(), 1, "{many}");
    assert!(many["sandboxes"][id]["timestampUnix"].is_i64(), "{many}");
}

/// The fake box's in-memory counter, counted up once by this call.
async fn count(server: &TestServer, name: &str) -> u64 {
    let (status, out) = server
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/exec"),
            Some(json!({"cmd": ["count"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{out}");
    out["stdout"].as_str().unwrap().trim().parse().unwrap()
}

pub fn now_ms() -> i64 {
    (time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}
