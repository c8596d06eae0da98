//! Wake, exec, files, stop, delete, reconcile and shutdown against the fake runtime.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use berth_protocol::BoxId;
use berth_server::{Server, ServerConfig};
use berth_store::{BoxState, NewBox, Store};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::fake::FakeRuntime;
use crate::harness::{error_code, request, TestServer};

async fn with_fake() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    (TestServer::start(fake.clone(), None, data).await, fake)
}

async fn exec(server: &TestServer, body: Value) -> (StatusCode, Value) {
    server
        .call(Method::POST, "/v1/boxes/alice/exec", Some(body))
        .await
}

#[tokio::test]
async fn concurrent_wakes_start_a_box_once_and_every_start_mints_a_fresh_token() {
    let (server, fake) = with_fake().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;

    let calls = (0..5).map(|_| exec(&server, json!({"cmd":["echo","hi"]})));
    for (status, out) in futures_util::future::join_all(calls).await {
        assert_eq!(status, StatusCode::OK, "{out}");
        assert_eq!(
            out,
            json!({"exit_code":0,"stdout":"echo hi as user\n","stderr":"","timed_out":false,"truncated":false})
        );
    }
    assert_eq!(
        fake.starts.load(Ordering::SeqCst),
        1,
        "five concurrent wakes, one start"
    );
    let (_, alice) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(alice["state"], "running");

    let (status, stopped) = server
        .call(Method::POST, "/v1/boxes/alice/stop", None)
        .await;
    assert_eq!(
        (status, &stopped["state"]),
        (StatusCode::OK, &json!("stopped"))
    );
    assert_eq!(fake.stopped.lock().unwrap().len(), 1);
    let (status, again) = server
        .call(Method::POST, "/v1/boxes/alice/stop", None)
        .await;
    assert_eq!(
        (status, &again["state"]),
        (StatusCode::OK, &json!("stopped")),
        "stopping a stopped box is fine"
    );

    let (status, started) = server
        .call(Method::POST, "/v1/boxes/alice/start", None)
        .await;
    assert_eq!(
        (status, &started["state"]),
        (StatusCode::OK, &json!("running"))
    );
    let (status, _) = server
        .call(Method::POST, "/v1/boxes/alice/start", None)
        .await;
    assert_eq!(status, StatusCode::OK, "starting a running box is fine");
    assert_eq!(fake.starts.load(Ordering::SeqCst), 2);
    let tokens = fake.tokens.lock().unwrap().clone();
    assert_eq!(tokens.len(), 2);
    assert_ne!(tokens[0], tokens[1], "a fresh boot token at every start");
    assert!(tokens
        .iter()
        .all(|t| t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit())));
}

#[tokio::test]
async fn exec_reports_exit_codes_users_and_refusals() {
    let (server, _fake) = with_fake().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    let (status, out) = exec(&server, json!({"cmd":["fail"]})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (out["exit_code"].as_i64(), out["stderr"].as_str()),
        (Some(3), Some("failing\n"))
    );
    let (_, out) = exec(
        &server,
        json!({"cmd":["id"],"user":"root","env":{"A":"b"},"cwd":"/tmp","stdin":"x","timeout_s":5}),
    )
    .await;
    assert_eq!(out["stdout"], "id as root\n");
    let (status, out) = exec(&server, json!({"cmd":["missing"]})).await;
    assert_eq!(
        (status, error_code(&out)),
        (StatusCode::NOT_FOUND, "not_found"),
        "{out}"
    );
}

#[tokio::test]
async fn exec_streams_ndjson_frames_when_asked() {
    let (server, _fake) = with_fake().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    let (status, headers, body) = server
        .raw(
            Method::POST,
            "/v1/boxes/alice/exec",
            Some(&server.key),
            &[("accept", "application/x-ndjson")],
            json!({"cmd":["echo","x"]}).to_string().into(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/x-ndjson");
    let frames: Vec<Value> = std::str::from_utf8(&body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        frames,
        vec![
            json!({"type":"started","pid":42}),
            json!({"type":"stdout","data":"ZWNobyB4IGFzIHVzZXIK"}),
            json!({"type":"exit","code":0,"signal":null,"timed_out":false}),
        ]
    );
}

#[tokio::test]
async fn files_pass_through_and_guest_errors_keep_their_meaning() {
    let (server, _fake) = with_fake().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    let key = Some(server.key.as_str());
    let (status, _, _) = server
        .raw(
            Method::PUT,
            "/v1/boxes/alice/files?path=/home/user/b.txt&mode=420",
            key,
            &[],
            Bytes::from_static(b"hello"),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, headers, bytes) = server
        .raw(
            Method::GET,
            "/v1/boxes/alice/files?path=/home/user/b.txt",
            key,
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!((status, &bytes[..]), (StatusCode::OK, &b"hello"[..]));
    assert_eq!(headers["content-type"], "application/octet-stream");
    let (status, stat) = server
        .call(
            Method::GET,
            "/v1/boxes/alice/files/stat?path=/home/user/b.txt",
            None,
        )
        .await;
    assert_eq!(
        (status, stat),
        (
            StatusCode::OK,
            json!({"name":"b.txt","kind":"file","size":5,"mode":420,"mtime":0})
        )
    );
    let (status, list) = server
        .call(
            Method::GET,
            "/v1/boxes/alice/files/list?path=/home/user",
            None,
        )
        .await;
    assert_eq!(
        (status, list["entries"].as_array().unwrap().len()),
        (StatusCode::OK, 1)
    );
    let (status, body) = server
        .call(
            Method::GET,
            "/v1/boxes/alice/files?path=/home/user/none",
            None,
        )
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::NOT_FOUND, "not_found")
    );
    let (status, body) = server
        .call(Method::GET, "/v1/boxes/alice/files?path=/root/secret", None)
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::FORBIDDEN, "permission_denied")
    );
    let (status, _) = server
        .call(
            Method::POST,
            "/v1/boxes/alice/files/mkdir?path=/home/user/d&recursive=true",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _) = server
        .call(
            Method::DELETE,
            "/v1/boxes/alice/files?path=/home/user/d&recursive=true",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn deleting_a_running_box_removes_it_from_the_runtime() {
    let (server, fake) = with_fake().await;
    let (_, alice) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    exec(&server, json!({"cmd":["true"]})).await;
    let (status, _) = server.call(Method::DELETE, "/v1/boxes/alice", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let id: BoxId = alice["id"].as_str().unwrap().parse().unwrap();
    assert_eq!(*fake.removed.lock().unwrap(), vec![id]);
    let (status, _) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_box_whose_processes_died_is_started_again_on_the_next_call() {
    let (server, fake) = with_fake().await;
    let (_, alice) = server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    exec(&server, json!({"cmd":["true"]})).await;
    fake.crash(&alice["id"].as_str().unwrap().parse().unwrap());
    let (status, out) = exec(&server, json!({"cmd":["echo","again"]})).await;
    assert_eq!(
        (status, &out["stdout"]),
        (StatusCode::OK, &json!("echo again as user\n")),
        "{out}"
    );
    assert_eq!(fake.starts.load(Ordering::SeqCst), 2);
    let (_, alice) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(alice["state"], "running");
}

#[tokio::test]
async fn shutdown_stops_every_running_box() {
    let (mut server, fake) = with_fake().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"idle"})))
        .await;
    exec(&server, json!({"cmd":["true"]})).await;
    server.shut_down().await;
    assert_eq!(
        fake.stopped.lock().unwrap().len(),
        1,
        "only the running box needed a stop"
    );
    let states: Vec<_> = server
        .store
        .list_all_boxes()
        .unwrap()
        .into_iter()
        .map(|b| b.state)
        .collect();
    assert_eq!(states, vec![BoxState::Stopped, BoxState::Stopped]);
}

#[tokio::test]
async fn shutdown_ends_open_exec_streams() {
    let (mut server, _fake) = with_fake().await;
    server
        .call(Method::POST, "/v1/boxes", Some(json!({"name":"alice"})))
        .await;
    let (addr, key) = (server.addr, server.key.clone());
    let stream = tokio::spawn(async move {
        request(
            addr,
            Method::POST,
            "/v1/boxes/alice/exec",
            Some(&key),
            &[("accept", "application/x-ndjson")],
            json!({"cmd":["hang"]}).to_string().into(),
        )
        .await
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    tokio::time::timeout(std::time::Duration::from_secs(10), server.shut_down())
        .await
        .expect("shutdown does not wait for a process that never ends");
    let (status, _, body) = stream.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    let first = String::from_utf8_lossy(&body)
        .lines()
        .next()
        .map(str::to_owned);
    assert_eq!(first.as_deref(), Some(r#"{"type":"started","pid":42}"#));
}

#[tokio::test]
async fn start_reconciles_the_store_and_the_runtime() {
    let data = tempfile::tempdir().unwrap();
    // A daemon "crashed" with a running box and a starting one.
    let (running, starting) = {
        let store = Store::open(&data.path().join(berth_store::DB_FILE)).unwrap();
        store.ensure_admin_key().unwrap();
        let tenant = store
            .tenant_by_name(berth_store::DEFAULT_TENANT)
            .unwrap()
            .unwrap();
        let mut ids = Vec::new();
        for (name, states) in [
            ("a", &[BoxState::Starting, BoxState::Running][..]),
            ("b", &[BoxState::Starting][..]),
        ] {
            let record = store
                .insert_box(&NewBox {
                    id: BoxId::from_random([name.as_bytes()[0]; 20]),
                    tenant_id: tenant.id.clone(),
                    name: name.into(),
                    template: "host".into(),
                    memory_mib: 512,
                    pids: 256,
                    cpus: 1.0,
                    sleep: berth_store::SleepSettings {
                        pause_after_s: 0,
                        snapshot_after_s: 0,
                        stop_after_s: 300,
                        auto_resume: true,
                    },
                    egress: None,
                    runtime: "fake".into(),
                    disk_mib: None,
                    labels: Default::default(),
                    env: Default::default(),
                })
                .unwrap();
            let mut generation = record.generation;
            for state in states {
                generation = store
                    .update_box_state(&record.id, generation, *state, None)
                    .unwrap();
            }
            ids.push(record.id);
        }
        (ids[0].clone(), ids[1].clone())
    };
    let orphan = BoxId::from_random([9; 20]);
    let fake = Arc::new(FakeRuntime::with_orphans(
        data.path().to_owned(),
        vec![orphan.clone()],
    ));
    let server = Server::bind(ServerConfig {
        data_dir: data.path().to_owned(),
        listen: "127.0.0.1:0".parse().unwrap(),
        runtimes: berth_server::Runtimes::single(fake.clone()),
        idle_check: berth_server::config::DEFAULT_IDLE_CHECK,
        host: Default::default(),
        tls: None,
        public_url: None,
        role: Default::default(),
    })
    .await
    .unwrap();
    assert_eq!(server.admin_key_created, None);
    let store = server.store();
    for id in [&running, &starting] {
        assert_eq!(
            store.get_box(id).unwrap().unwrap().state,
            BoxState::Stopped,
            "{id}"
        );
    }
    let mut stopped = fake.stopped.lock().unwrap().clone();
    stopped.sort();
    let mut expected = vec![running, starting];
    expected.sort();
    assert_eq!(stopped, expected);
    assert_eq!(*fake.removed.lock().unwrap(), vec![orphan]);
}
