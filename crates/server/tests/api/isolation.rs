//! Tenant isolation on every box endpoint: another tenant's key gets `404 not_found`
//! (never 403) for the box, by id and by name, and nothing happens to the box; the owner
//! gets something other than 404 on the same call, so a 404 always means "not yours", not
//! "no such route".

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use serde_json::json;

use crate::fake::FakeRuntime;
use crate::harness::{error_code, TestServer};
use crate::tenants::new_tenant;

/// One call on a box: method, path after `/v1/boxes/{ref}`, body, headers.
struct Call {
    method: Method,
    suffix: &'static str,
    body: &'static str,
    headers: &'static [(&'static str, &'static str)],
}

const fn call(
    method: Method,
    suffix: &'static str,
    body: &'static str,
    headers: &'static [(&'static str, &'static str)],
) -> Call {
    Call {
        method,
        suffix,
        body,
        headers,
    }
}

const JSON: &[(&str, &str)] = &[("content-type", "application/json")];
const NDJSON: &[(&str, &str)] = &[
    ("content-type", "application/json"),
    ("accept", "application/x-ndjson"),
];
const SSE: &[(&str, &str)] = &[("accept", "text/event-stream")];
const SSE_RESUME: &[(&str, &str)] = &[("accept", "text/event-stream"), ("last-event-id", "0")];

/// Every box endpoint but delete (which goes last).
fn calls() -> Vec<Call> {
    vec![
        call(Method::GET, "", "", &[]),
        call(Method::POST, "/start", "", &[]),
        call(Method::POST, "/stop", "", &[]),
        call(Method::POST, "/exec", r#"{"cmd":["echo","hi"]}"#, JSON),
        call(Method::POST, "/exec", r#"{"cmd":["echo","hi"]}"#, NDJSON),
        call(Method::PUT, "/files?path=/home/user/a.txt", "secret", &[]),
        call(Method::GET, "/files?path=/home/user/a.txt", "", &[]),
        call(Method::GET, "/files/list?path=/home/user", "", &[]),
        call(Method::GET, "/files/stat?path=/home/user/a.txt", "", &[]),
        call(Method::POST, "/files/mkdir?path=/home/user/d", "", &[]),
        call(Method::DELETE, "/files?path=/home/user/a.txt", "", &[]),
        call(Method::POST, "/messages", r#"{"content":"hi"}"#, JSON),
        call(Method::GET, "/messages", "", &[]),
        call(Method::GET, "/messages?after=0&limit=10", "", &[]),
        call(Method::GET, "/events?after=0&wait=false", "", &[]),
        call(Method::GET, "/events", "", SSE),
        call(Method::GET, "/events?after=0", "", SSE),
        call(Method::GET, "/events", "", SSE_RESUME),
    ]
}

/// The status of one call, reading the body only for a short while: an event stream
/// never ends, and its status is all we need. Also the body when it came in time.
async fn status_of(
    server: &TestServer,
    key: &str,
    method: Method,
    path: &str,
    body: &'static str,
    headers: &[(&str, &str)],
) -> (StatusCode, Option<serde_json::Value>) {
    let stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let mut req = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "berth")
        .header("authorization", format!("Bearer {key}"));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let response = sender
        .send_request(req.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let collected = tokio::time::timeout(
        Duration::from_millis(500),
        http_body_util::BodyExt::collect(response.into_body()),
    )
    .await;
    conn.abort();
    let value = match collected {
        Ok(Ok(bytes)) => serde_json::from_slice(&bytes.to_bytes()).ok(),
        _ => None,
    };
    (status, value)
}

#[tokio::test]
async fn another_tenants_box_is_404_on_every_endpoint() {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    let server = TestServer::start(fake.clone(), None, data).await;
    let (status, created) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "secret"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["id"].as_str().unwrap().to_owned();
    let other = new_tenant(&server, "other").await;

    for reference in [id.as_str(), "secret"] {
        for c in calls() {
            let path = format!("/v1/boxes/{reference}{}", c.suffix);
            let (status, body) =
                status_of(&server, &other, c.method.clone(), &path, c.body, c.headers).await;
            assert_eq!(
                status,
                StatusCode::NOT_FOUND,
                "{} {path}: {body:?}",
                c.method
            );
            let body = body.unwrap_or_else(|| panic!("{} {path}: no JSON error", c.method));
            assert_eq!(error_code(&body), "not_found", "{} {path}", c.method);
        }
        let path = format!("/v1/boxes/{reference}");
        let (status, _) = status_of(&server, &other, Method::DELETE, &path, "", &[]).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "DELETE {path}");
    }
    // Nothing happened to the box: never woken, still there, no message taken.
    assert_eq!(fake.starts.load(Ordering::SeqCst), 0);
    let (status, again) = server
        .call(Method::GET, &format!("/v1/boxes/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again["state"], "stopped");
    let (_, messages) = server
        .call(Method::GET, &format!("/v1/boxes/{id}/messages"), None)
        .await;
    assert_eq!(
        messages["messages"].as_array().map(Vec::len).unwrap_or(0),
        0,
        "{messages}"
    );
    let (_, listed) =
        crate::tenants::call_as(&server, &other, Method::GET, "/v1/boxes", None).await;
    assert_eq!(listed, json!({"boxes": []}));

    // The owner's same calls are not 404: the routes exist and the box is found.
    for c in calls() {
        let path = format!("/v1/boxes/{id}{}", c.suffix);
        let (status, body) = status_of(
            &server,
            &server.key,
            c.method.clone(),
            &path,
            c.body,
            c.headers,
        )
        .await;
        assert_ne!(
            status,
            StatusCode::NOT_FOUND,
            "owner: {} {path}: {body:?}",
            c.method
        );
    }
    let (status, _) = status_of(
        &server,
        &server.key,
        Method::DELETE,
        &format!("/v1/boxes/{id}"),
        "",
        &[],
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}
