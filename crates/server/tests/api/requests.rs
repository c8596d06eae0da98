//! Everything that needs no box: auth, validation, body limits, tenancy, failed starts.

use std::sync::Arc;
use std::time::Duration;

use berth_server::{Server, ServerConfig};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{error_code, NoBoxes, TestServer};

#[tokio::test]
async fn first_start_writes_the_admin_key_and_url_and_later_starts_do_not() {
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let dir = data.path().to_owned();
    let mut server = TestServer::start(Arc::new(NoBoxes), None, data).await;
    let on_disk = std::fs::read_to_string(dir.join("admin.key")).unwrap();
    assert_eq!(on_disk.trim(), server.key);
    assert_eq!(
        std::fs::metadata(dir.join("admin.key"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let url = std::fs::read_to_string(dir.join("berth.url")).unwrap();
    assert_eq!(url, format!("http://{}\n", server.addr));
    server.shut_down().await;
    drop(server.store.clone());

    let again = Server::bind(ServerConfig {
        data_dir: dir.clone(),
        listen: "127.0.0.1:0".parse().unwrap(),
        runtimes: berth_server::Runtimes::single(Arc::new(NoBoxes)),
        idle_check: berth_server::config::DEFAULT_IDLE_CHECK,
        host: Default::default(),
        tls: None,
        public_url: None,
        role: Default::default(),
    })
    .await
    .unwrap();
    assert_eq!(again.admin_key_created, None);
    assert!(
        again
            .store()
            .authenticate(&server.key)
            .unwrap()
            .unwrap()
            .is_admin,
        "the old key still works"
    );
}

#[tokio::test]
async fn health_needs_no_key_and_everything_else_does() {
    let server = TestServer::without_runtime().await;
    let (status, _, body) = server
        .raw(Method::GET, "/v1/health", None, &[], Bytes::new())
        .await;
    assert_eq!(status, StatusCode::OK);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["status"], "ok");

    for key in [None, Some("berth_wrong"), Some("")] {
        let (status, _, body) = server
            .raw(Method::GET, "/v1/boxes", key, &[], Bytes::new())
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{key:?}");
        assert_eq!(
            error_code(&serde_json::from_slice(&body).unwrap()),
            "unauthorized"
        );
    }
    let (status, body) = server.call(Method::GET, "/v1/boxes", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({"boxes": []}));
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_json() {
    let server = TestServer::without_runtime().await;
    let (status, body) = server.call(Method::GET, "/v1/nope", None).await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let (status, body) = server.call(Method::PATCH, "/v1/boxes", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    error_code(&body);
}

#[tokio::test]
async fn boxes_are_created_listed_found_and_deleted() {
    let server = TestServer::without_runtime().await;
    let (status, created) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name":"alice","limits":{"memory_mib":256}})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["name"], "alice");
    assert_eq!(created["template"], "host");
    assert_eq!(created["state"], "stopped");
    assert_eq!(created["state_reason"], Value::Null);
    assert_eq!(
        created["limits"],
        json!({"memory_mib":256,"pids":256,"cpus":1.0})
    );
    let id = created["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("bx_"));
    assert!(created["created_at"].as_str().unwrap().ends_with('Z'));

    let (status, by_name) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(status, StatusCode::OK);
    let (_, by_id) = server
        .call(Method::GET, &format!("/v1/boxes/{id}"), None)
        .await;
    assert_eq!(by_name, by_id);
    let (_, list) = server.call(Method::GET, "/v1/boxes", None).await;
    assert_eq!(list["boxes"].as_array().unwrap().len(), 1);

    let (status, body) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::CONFLICT, "already_exists")
    );

    let (status, _) = server.call(Method::DELETE, "/v1/boxes/alice", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = server
        .call(Method::GET, &format!("/v1/boxes/{id}"), None)
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::NOT_FOUND, "not_found")
    );
}

#[tokio::test]
async fn bad_requests_are_400_invalid_request_with_a_useful_message() {
    let server = TestServer::without_runtime().await;
    let cases: Vec<(&str, Bytes, &str)> = vec![
        (
            "bad name",
            json!({"name":"Alice"}).to_string().into(),
            "a-z",
        ),
        (
            "leading dash",
            json!({"name":"-a"}).to_string().into(),
            "start or end",
        ),
        (
            "unknown template",
            json!({"name":"a","template":"ubuntu"}).to_string().into(),
            "available: debian, desktop, echo, host, minimal",
        ),
        (
            "unknown field",
            json!({"name":"a","colour":"red"}).to_string().into(),
            "unknown field `colour`",
        ),
        (
            "unknown limit",
            json!({"name":"a","limits":{"disk":1}}).to_string().into(),
            "unknown field `disk`",
        ),
        (
            "wrong type",
            json!({"name":7}).to_string().into(),
            "invalid type",
        ),
        (
            "memory too small",
            json!({"name":"a","limits":{"memory_mib":1}})
                .to_string()
                .into(),
            "memory_mib",
        ),
        (
            "too many cpus",
            json!({"name":"a","limits":{"cpus":1000.0}})
                .to_string()
                .into(),
            "cpus",
        ),
        ("malformed JSON", Bytes::from_static(b"{\"name\":"), "EOF"),
        ("empty body", Bytes::new(), "EOF"),
    ];
    for (what, body, needle) in cases {
        let (status, _, answer) = server
            .raw(
                Method::POST,
                "/v1/boxes",
                Some(&server.key),
                &[("content-type", "application/json")],
                body,
            )
            .await;
        let answer: Value =
            serde_json::from_slice(&answer).unwrap_or_else(|_| panic!("{what}: not JSON"));
        assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {answer}");
        assert_eq!(error_code(&answer), "invalid_request", "{what}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{what}: {message:?} lacks {needle:?}"
        );
    }
    let (_, list) = server.call(Method::GET, "/v1/boxes", None).await;
    assert_eq!(list["boxes"], json!([]), "nothing was created");
}

#[tokio::test]
async fn json_bodies_over_1_mib_are_413() {
    let server = TestServer::without_runtime().await;
    let big = format!("{{\"name\":\"{}\"}}", "a".repeat(1024 * 1024 + 1));
    let (status, _, body) = server
        .raw(
            Method::POST,
            "/v1/boxes",
            Some(&server.key),
            &[],
            big.into(),
        )
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        error_code(&serde_json::from_slice(&body).unwrap()),
        "payload_too_large"
    );
}

#[tokio::test]
async fn a_2_gib_upload_is_refused_before_it_is_sent() {
    let server = TestServer::without_runtime().await;
    let (status, _) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "PUT /v1/boxes/alice/files?path=/home/user/big HTTP/1.1\r\nhost: berth\r\n\
         authorization: Bearer {}\r\ncontent-length: {}\r\n\r\n",
        server.key,
        2u64 << 30
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Some of the body, then wait for the answer: it must come without the other 2 GiB.
    let _ = stream.write_all(&vec![0u8; 64 * 1024]).await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    answer.extend_from_slice(&buf[..n]);
                    if answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.ends_with(b"}") {
                        break;
                    }
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "no answer within 10 s");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("payload_too_large"), "{answer}");
    let (_, alice) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(
        alice["state"], "stopped",
        "the box was not woken for a refused upload"
    );
}

#[tokio::test]
async fn file_paths_must_be_absolute_without_nul() {
    let server = TestServer::without_runtime().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    for path in [
        "/v1/boxes/alice/files?path=/home/user/a%00b",
        "/v1/boxes/alice/files?path=a.txt",
        "/v1/boxes/alice/files/stat?path=",
        "/v1/boxes/alice/files",
        "/v1/boxes/alice/files?path=/a&bogus=1",
        "/v1/boxes/alice/files?path=/a&user=admin",
    ] {
        let (status, body) = server.call(Method::GET, path, None).await;
        assert_eq!(
            (status, error_code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{path}: {body}"
        );
    }
    let (_, alice) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(
        alice["state"], "stopped",
        "a refused call does not wake the box"
    );
}

#[tokio::test]
async fn missing_boxes_are_404_on_every_call() {
    let server = TestServer::without_runtime().await;
    let missing = "bx_aaaaaaaaaaaaaaaaaaaa";
    for (method, path, body) in [
        (Method::GET, format!("/v1/boxes/{missing}"), None),
        (Method::GET, "/v1/boxes/nobody".to_owned(), None),
        (Method::DELETE, "/v1/boxes/nobody".to_owned(), None),
        (Method::POST, "/v1/boxes/nobody/start".to_owned(), None),
        (Method::POST, "/v1/boxes/nobody/stop".to_owned(), None),
        (
            Method::POST,
            "/v1/boxes/nobody/exec".to_owned(),
            Some(json!({"cmd":["true"]})),
        ),
        (
            Method::GET,
            "/v1/boxes/nobody/files?path=/etc/hostname".to_owned(),
            None,
        ),
    ] {
        let (status, answer) = server.call(method.clone(), &path, body).await;
        assert_eq!(
            (status, error_code(&answer)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn another_tenants_box_is_404_never_403() {
    let server = TestServer::without_runtime().await;
    let (_, alice) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    let id = alice["id"].as_str().unwrap().to_owned();
    let other = server.store.create_tenant("other").unwrap();
    let other_key = server.store.create_api_key(&other.id, false).unwrap();
    for (method, path) in [
        (Method::GET, format!("/v1/boxes/{id}")),
        (Method::GET, "/v1/boxes/alice".to_owned()),
        (Method::DELETE, format!("/v1/boxes/{id}")),
        (Method::POST, format!("/v1/boxes/{id}/start")),
        (Method::POST, format!("/v1/boxes/{id}/stop")),
        (
            Method::GET,
            format!("/v1/boxes/{id}/files?path=/etc/hostname"),
        ),
    ] {
        let (status, _, body) = server
            .raw(method.clone(), &path, Some(&other_key), &[], Bytes::new())
            .await;
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (status, error_code(&body)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{method} {path}"
        );
    }
    let (status, _, list) = server
        .raw(
            Method::GET,
            "/v1/boxes",
            Some(&other_key),
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        serde_json::from_slice::<Value>(&list).unwrap(),
        json!({"boxes": []})
    );
    // The same name is free in the other tenant.
    let (status, _, _) = server
        .raw(
            Method::POST,
            "/v1/boxes",
            Some(&other_key),
            &[],
            json!({"name":"alice"}).to_string().into(),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, still) = server
        .call(Method::GET, &format!("/v1/boxes/{id}"), None)
        .await;
    assert_eq!((status, &still["id"]), (StatusCode::OK, &json!(id)));
}

#[tokio::test]
async fn a_box_that_cannot_start_is_503_and_failed_with_the_reason() {
    let server = TestServer::without_runtime().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    let (status, body) = server
        .call(Method::POST, "/v1/boxes/alice/start", None)
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    );
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("POST /v1/boxes/alice/start") && message.contains("runs without one"),
        "{message}"
    );
    let (_, alice) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(alice["state"], "failed");
    assert!(
        alice["state_reason"]
            .as_str()
            .unwrap()
            .contains("a runtime is missing"),
        "{alice}"
    );
    // Calls that need the box try to wake it again (failed → starting), and fail the same way.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes/alice/exec",
            Some(json!({"cmd":["true"]})),
        )
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::SERVICE_UNAVAILABLE, "unavailable")
    );
    // A failed box can be stopped, and deleted.
    let (status, stopped) = server
        .call(Method::POST, "/v1/boxes/alice/stop", None)
        .await;
    assert_eq!(
        (status, &stopped["state"]),
        (StatusCode::OK, &json!("stopped"))
    );
    let (status, _) = server.call(Method::DELETE, "/v1/boxes/alice", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn exec_bodies_are_strict() {
    let server = TestServer::without_runtime().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    for body in [
        json!({"cmd":[]}),
        json!({"cmd":["true"],"timeout_s":0}),
        json!({"cmd":["true"],"timeout_s":86401}),
        json!({"cmd":["true"],"user":"admin"}),
        json!({"cmd":["true"],"shell":true}),
        json!({"cmd":"true"}),
    ] {
        let (status, answer) = server
            .call(Method::POST, "/v1/boxes/alice/exec", Some(body.clone()))
            .await;
        assert_eq!(
            (status, error_code(&answer)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{body}"
        );
    }
    let (_, alice) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(
        alice["state"], "stopped",
        "a refused exec does not wake the box"
    );
}
