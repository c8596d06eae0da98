//! `POST /v1/tenants`: admin only, strict body, a key that works and sees only its boxes.

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{error_code, TestServer};

/// A JSON call with `key`.
pub async fn call_as(
    server: &TestServer,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let body = body.map(|v| Bytes::from(v.to_string())).unwrap_or_default();
    let (status, _, bytes) = server.raw(method, path, Some(key), &[], body).await;
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    (status, value)
}

/// Makes a tenant with the admin key; returns its key.
pub async fn new_tenant(server: &TestServer, name: &str) -> String {
    let (status, body) = server
        .call(Method::POST, "/v1/tenants", Some(json!({"name": name})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["api_key"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn an_admin_creates_a_tenant_whose_key_works_and_sees_no_boxes() {
    let server = TestServer::without_runtime().await;
    let (status, _) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name": "mine"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);

    let (status, body) = server
        .call(Method::POST, "/v1/tenants", Some(json!({"name": "acme"})))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["tenant"]["name"], "acme");
    assert!(
        body["tenant"]["id"].as_str().unwrap().starts_with("tn_"),
        "{body}"
    );
    let key = body["api_key"].as_str().unwrap();
    assert!(key.starts_with("berth_"), "{body}");

    let (status, list) = call_as(&server, key, Method::GET, "/v1/boxes", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list, json!({"boxes": []}));
    // The same name in another tenant is fine.
    let (status, created) = call_as(
        &server,
        key,
        Method::POST,
        "/v1/boxes",
        Some(json!({"name": "mine"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (_, list) = call_as(&server, key, Method::GET, "/v1/boxes", None).await;
    assert_eq!(list["boxes"].as_array().unwrap().len(), 1);
    let (_, admin_list) = server.call(Method::GET, "/v1/boxes", None).await;
    let admins = admin_list["boxes"].as_array().unwrap();
    assert_eq!(admins.len(), 1);
    assert_ne!(admins[0]["id"], created["id"]);
    // Keys are stored hashed: the plaintext is nowhere in the database file.
    let db = std::fs::read(server.data.path().join("berth.db")).unwrap();
    assert!(!db.windows(key.len()).any(|w| w == key.as_bytes()));
}

#[tokio::test]
async fn only_an_admin_creates_tenants() {
    let server = TestServer::without_runtime().await;
    let key = new_tenant(&server, "acme").await;
    let (status, body) = call_as(
        &server,
        &key,
        Method::POST,
        "/v1/tenants",
        Some(json!({"name": "evil"})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(error_code(&body), "permission_denied");
    assert!(server.store.tenant_by_name("evil").unwrap().is_none());
    let (status, _, _) = server
        .raw(
            Method::POST,
            "/v1/tenants",
            None,
            &[],
            Bytes::from(r#"{"name":"anon"}"#),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn tenant_bodies_are_strict_and_names_unique() {
    let server = TestServer::without_runtime().await;
    new_tenant(&server, "acme").await;
    let (status, body) = server
        .call(Method::POST, "/v1/tenants", Some(json!({"name": "acme"})))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(error_code(&body), "already_exists");
    for bad in [
        json!({"name": "Acme"}),
        json!({"name": ""}),
        json!({"name": "a", "admin": true}),
        json!({}),
    ] {
        let (status, body) = server
            .call(Method::POST, "/v1/tenants", Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(error_code(&body), "invalid_request");
    }
}
