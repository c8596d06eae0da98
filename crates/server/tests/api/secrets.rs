//! `/v1/secrets`: set → list → replace → delete, strict input, per-tenant isolation, no
//! value in any answer or in the database files, and a daemon that refuses a wrong key.

use std::sync::Arc;
use std::time::Duration;

use berth_server::{Server, ServerConfig, ServerError};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::harness::{error_code, NoBoxes, TestServer};
use crate::tenants::{call_as, new_tenant};

const VALUE: &str = "sk-ant-SENTINEL-a1b2c3d4e5";
const VALUE2: &str = "sk-ant-REPLACED-f6e5d4c3b2";

fn no_value(body: &Value) {
    let text = body.to_string();
    assert!(
        !text.contains("SENTINEL") && !text.contains("REPLACED"),
        "a value leaked: {text}"
    );
}

#[tokio::test]
async fn set_list_replace_delete_and_never_a_value() {
    let server = TestServer::without_runtime().await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/secrets",
            Some(json!({"name": "anthropic", "value": VALUE})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    no_value(&body);
    assert_eq!(body["name"], "anthropic");
    let created_at = body["created_at"].as_str().unwrap().to_owned();
    assert_eq!(body["updated_at"], body["created_at"]);
    assert_eq!(body.as_object().unwrap().len(), 3, "{body}");

    server
        .call(
            Method::POST,
            "/v1/secrets",
            Some(json!({"name": "github", "value": "ghp_x y"})),
        )
        .await;
    let (status, list) = server.call(Method::GET, "/v1/secrets", None).await;
    assert_eq!(status, StatusCode::OK);
    no_value(&list);
    let names: Vec<&str> = list["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["anthropic", "github"]);

    let (status, body) = server
        .call(
            Method::POST,
            "/v1/secrets",
            Some(json!({"name": "anthropic", "value": VALUE2})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    no_value(&body);
    assert_eq!(body["created_at"], created_at.as_str());

    let (status, body) = server
        .call(Method::DELETE, "/v1/secrets/anthropic", None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = server
        .call(Method::DELETE, "/v1/secrets/anthropic", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(error_code(&body), "not_found");
    let (_, list) = server.call(Method::GET, "/v1/secrets", None).await;
    assert_eq!(list["secrets"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn bad_names_and_values_are_400_without_the_value() {
    let server = TestServer::without_runtime().await;
    let long = "v".repeat(8193);
    let cases = [
        json!({"name": "Anthropic", "value": "x"}),
        json!({"name": "_x", "value": "x"}),
        json!({"name": "", "value": "x"}),
        json!({"name": "a".repeat(64), "value": "x"}),
        json!({"name": "ok", "value": ""}),
        json!({"name": "ok", "value": "SENTINEL\r\nX-Evil: 1"}),
        json!({"name": "ok", "value": " SENTINEL"}),
        json!({"name": "ok", "value": "SENTINEL\u{0}"}),
        json!({"name": "ok", "value": "SENTINEL-é"}),
        json!({"name": "ok", "value": long}),
        json!({"name": "ok", "value": "SENTINEL", "extra": 1}),
        json!({"name": "ok"}),
        json!({"name": "ok", "value": 5}),
    ];
    for bad in cases {
        let (status, body) = server
            .call(Method::POST, "/v1/secrets", Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(error_code(&body), "invalid_request");
        no_value(&body);
    }
    let (status, body) = server.call(Method::DELETE, "/v1/secrets/Bad", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, list) = server.call(Method::GET, "/v1/secrets", None).await;
    assert_eq!(list, json!({"secrets": []}));
}

#[tokio::test]
async fn secrets_need_a_key() {
    let server = TestServer::without_runtime().await;
    for (method, path, body) in [
        (Method::GET, "/v1/secrets", ""),
        (Method::POST, "/v1/secrets", r#"{"name":"a","value":"b"}"#),
        (Method::DELETE, "/v1/secrets/a", ""),
    ] {
        let (status, _, _) = server.raw(method, path, None, &[], Bytes::from(body)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
    }
}

#[tokio::test]
async fn a_tenant_cannot_see_or_delete_another_tenants_secret() {
    let server = TestServer::without_runtime().await;
    let a = new_tenant(&server, "a").await;
    let b = new_tenant(&server, "b").await;
    let (status, _) = call_as(
        &server,
        &a,
        Method::POST,
        "/v1/secrets",
        Some(json!({"name": "tok", "value": VALUE})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, list) = call_as(&server, &b, Method::GET, "/v1/secrets", None).await;
    assert_eq!(list, json!({"secrets": []}));
    let (status, _) = call_as(&server, &b, Method::DELETE, "/v1/secrets/tok", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // B's own "tok" is a different secret: created, not a replacement of A's.
    let (status, _) = call_as(
        &server,
        &b,
        Method::POST,
        "/v1/secrets",
        Some(json!({"name": "tok", "value": VALUE2})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, list) = call_as(&server, &a, Method::GET, "/v1/secrets", None).await;
    assert_eq!(list["secrets"][0]["name"], "tok");
    // The admin (default tenant) sees neither.
    let (_, list) = server.call(Method::GET, "/v1/secrets", None).await;
    assert_eq!(list, json!({"secrets": []}));
}

#[tokio::test]
async fn the_value_is_not_in_the_database_files_and_the_key_is_0600() {
    use std::os::unix::fs::PermissionsExt;
    let server = TestServer::without_runtime().await;
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/secrets",
            Some(json!({"name": "anthropic", "value": VALUE})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let dir = server.data.path();
    let mut read = 0;
    for name in ["berth.db", "berth.db-wal"] {
        if let Ok(bytes) = std::fs::read(dir.join(name)) {
            read += 1;
            assert!(
                !bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes()),
                "the plaintext is in {name}"
            );
        }
    }
    assert!(read >= 1);
    let key = std::fs::metadata(dir.join("secrets.key")).unwrap();
    assert_eq!(key.permissions().mode() & 0o777, 0o600);
    assert_eq!(key.len(), 32);
}

fn config(data: &std::path::Path) -> ServerConfig {
    ServerConfig {
        data_dir: data.to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        runtimes: berth_server::Runtimes::single(Arc::new(NoBoxes)),
        idle_check: Duration::from_secs(1),
        host: Default::default(),
        tls: None,
        public_url: None,
        role: Default::default(),
    }
}

#[tokio::test]
async fn the_daemon_refuses_to_start_with_another_key_or_none() {
    let data = tempfile::tempdir().unwrap();
    let key_path = data.path().join("secrets.key");
    {
        let server = Server::bind(config(data.path())).await.unwrap();
        let store = server.store();
        let tenant = store.tenant_by_name("default").unwrap().unwrap();
        // A row sealed by some other key.
        store
            .put_secret(&tenant.id, "x", "00112233aabbccdd", b"nonce", b"sealed")
            .unwrap();
    }
    let before = std::fs::read(&key_path).unwrap();
    let err = Server::bind(config(data.path())).await.unwrap_err();
    let text = berth_runtime::error_chain(&err);
    assert!(matches!(err, ServerError::Secrets(_)), "{text}");
    assert!(
        text.contains("00112233aabbccdd") && text.contains("restore the key file"),
        "{text}"
    );
    std::fs::remove_file(&key_path).unwrap();
    let err = Server::bind(config(data.path())).await.unwrap_err();
    let text = berth_runtime::error_chain(&err);
    assert!(text.contains("missing"), "{text}");
    assert!(
        !key_path.exists(),
        "a new key was made over existing secrets"
    );
    // A key file others could read is refused, with the fix.
    std::fs::write(&key_path, &before).unwrap();
    std::fs::set_permissions(
        &key_path,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .unwrap();
    let err = Server::bind(config(data.path())).await.unwrap_err();
    assert!(
        berth_runtime::error_chain(&err).contains("chmod 600"),
        "{}",
        berth_runtime::error_chain(&err)
    );
}
