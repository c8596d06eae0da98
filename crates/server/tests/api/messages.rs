//! Durable messages, delivery, the event log and SSE against the fake runtime (whose agent
//! speaks the v2 harness calls with a faithful fake harness).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_protocol::BoxId;
use berth_store::{MessageState, Store, DB_FILE};
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::fake::FakeRuntime;
use crate::harness::{error_code, NoBoxes, TestServer};
use crate::sse::{open_sse, SseEvent};

async fn with_fake() -> (TestServer, Arc<FakeRuntime>) {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    (TestServer::start(fake.clone(), None, data).await, fake)
}

async fn create(server: &TestServer, name: &str) -> BoxId {
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({ "name": name, "template": "echo" })),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["id"].as_str().unwrap().parse().unwrap()
}

async fn post(server: &TestServer, name: &str, body: Value) -> (StatusCode, Value) {
    server
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/messages"),
            Some(body),
        )
        .await
}

/// Polls the message list until `n` messages are delivered (30 s at most: 500 fsynced deliveries on a loaded 2-core host).
async fn wait_delivered(server: &TestServer, name: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server
            .call(
                Method::GET,
                &format!("/v1/boxes/{name}/messages?limit=1000"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let messages = body["messages"].as_array().unwrap().clone();
        let delivered = messages
            .iter()
            .filter(|m| m["state"] == "delivered")
            .count();
        if delivered >= n {
            return messages;
        }
        assert!(
            Instant::now() < deadline,
            "only {delivered} of {n} delivered: {messages:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The stored events (JSON page), polling until `done` holds (10 s at most).
pub(crate) async fn wait_events(
    server: &TestServer,
    name: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, body) = server
            .call(
                Method::GET,
                &format!("/v1/boxes/{name}/events?wait=false"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let events = body["events"].as_array().unwrap().clone();
        if done(&events) {
            assert_eq!(
                body["next_after"],
                events.last().map_or(json!(0), |e| e["seq"].clone())
            );
            return events;
        }
        assert!(
            Instant::now() < deadline,
            "events never got there: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ends the daemon as a crash would (its task aborted, nothing stopped) and hands back its
/// data dir once the dead daemon has let go of it.
pub(crate) async fn crash(mut server: TestServer) -> tempfile::TempDir {
    let data = std::mem::replace(&mut server.data, tempfile::tempdir().unwrap());
    drop(server);
    let deadline = Instant::now() + Duration::from_secs(10);
    while berth_server::data_dir_lock::DataDirLock::acquire(data.path()).is_err() {
        assert!(
            Instant::now() < deadline,
            "the first daemon never went away"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    data
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

fn assert_gapless(events: &[Value]) {
    for (i, event) in events.iter().enumerate() {
        assert_eq!(
            event["seq"],
            json!(i as u64 + 1),
            "seq gap at {i}: {events:?}"
        );
    }
}

#[tokio::test]
async fn a_message_is_committed_before_202_and_ids_are_idempotent() {
    let (server, _fake) = with_fake().await;
    let id = create(&server, "alice").await;
    let (status, posted) = post(&server, "alice", json!({"content": "hello"})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{posted}");
    assert_eq!(posted["seq"], 1);
    let msg_id = posted["id"].as_str().unwrap().to_owned();
    assert!(msg_id.starts_with("msg_"), "{posted}");
    // Right after the 202, another connection to the database file sees the row.
    let second = Store::open(&server.data.path().join(DB_FILE)).unwrap();
    let stored = second.list_messages(&id, 0, 10).unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (stored[0].id.as_str(), stored[0].content.as_str()),
        (msg_id.as_str(), "hello")
    );

    let (status, keyed) = post(&server, "alice", json!({"content": "a", "id": "k-1:x.y_z"})).await;
    assert_eq!(
        (status, &keyed["id"], &keyed["seq"]),
        (StatusCode::ACCEPTED, &json!("k-1:x.y_z"), &json!(2))
    );
    // Where the message's turn starts in the box's event log.
    assert!(keyed["events_after"].is_u64(), "{keyed}");
    let (status, again) = post(&server, "alice", json!({"content": "a", "id": "k-1:x.y_z"})).await;
    assert_eq!(
        (status, &again),
        (StatusCode::ACCEPTED, &keyed),
        "the same id answers the same message"
    );
    let (status, body) = post(&server, "alice", json!({"content": "b", "id": "k-1:x.y_z"})).await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::CONFLICT, "conflict")
    );
    for bad in ["", "has space", "é", &"x".repeat(129)] {
        let (status, body) = post(&server, "alice", json!({"content": "c", "id": bad})).await;
        assert_eq!(
            (status, error_code(&body)),
            (StatusCode::BAD_REQUEST, "invalid_request"),
            "{bad:?}"
        );
    }
    let (status, body) = post(
        &server,
        "alice",
        json!({"content": "x".repeat(256 * 1024 + 1)}),
    )
    .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let (status, body) = post(&server, "alice", json!({"content": "c", "extra": 1})).await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (status, body) = post(&server, "nobody", json!({"content": "c"})).await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::NOT_FOUND, "not_found")
    );
    for path in [
        "/v1/boxes/nobody/messages",
        "/v1/boxes/nobody/events?wait=false",
        "/v1/boxes/nobody/events",
    ] {
        let (status, body) = server.call(Method::GET, path, None).await;
        assert_eq!(
            (status, error_code(&body)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
    // Refused messages took no seq: the list is exactly the two accepted ones.
    let listed = wait_delivered(&server, "alice", 2).await;
    let seqs: Vec<&Value> = listed.iter().map(|m| &m["seq"]).collect();
    assert_eq!(seqs, vec![&json!(1), &json!(2)]);
    assert!(listed
        .iter()
        .all(|m| m["delivered_at"].is_string() && m["created_at"].is_string()));
    let (status, page) = server
        .call(
            Method::GET,
            "/v1/boxes/alice/messages?after=1&limit=1",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["messages"].as_array().unwrap().len(), 1);
    assert_eq!(page["messages"][0]["id"], "k-1:x.y_z");
    let (status, _) = server
        .call(Method::GET, "/v1/boxes/alice/messages?limit=1001", None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn messages_reach_the_harness_once_in_order_despite_failed_tries() {
    let (server, fake) = with_fake().await;
    create(&server, "alice").await;
    // The first tries fail: the pump retries with backoff, in order.
    fake.harness.fail_deliveries.store(3, Ordering::SeqCst);
    let contents: Vec<String> = (0..30).map(|i| format!("message {i}")).collect();
    for (i, content) in contents.iter().enumerate() {
        let (status, posted) = post(&server, "alice", json!({ "content": content })).await;
        assert_eq!(
            (status, &posted["seq"]),
            (StatusCode::ACCEPTED, &json!(i as u64 + 1))
        );
    }
    wait_delivered(&server, "alice", contents.len()).await;
    assert_eq!(fake.harness.received(), contents, "each once, in order");
    assert_eq!(fake.starts.load(Ordering::SeqCst), 1);
    let events = wait_events(&server, "alice", |e| count(e, "result") == 30).await;
    assert_gapless(&events);
    let states: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "state")
        .map(|e| &e["data"]["state"])
        .collect();
    assert_eq!(states, vec![&json!("starting"), &json!("running")]);
    assert_eq!(count(&events, "harness_start"), 1);
    let answers: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "result")
        .map(|e| &e["data"]["result"])
        .collect();
    assert_eq!(answers, contents.iter().collect::<Vec<_>>());
    let db = Store::open(&server.data.path().join(DB_FILE)).unwrap();
    let record = db
        .get_box_by_name(
            &db.list_boxes(&server_tenant(&db)).unwrap()[0].tenant_id,
            "alice",
        )
        .unwrap()
        .unwrap();
    assert!(db
        .list_messages(&record.id, 0, 100)
        .unwrap()
        .iter()
        .all(|m| m.state == MessageState::Delivered));
}

fn server_tenant(db: &Store) -> berth_protocol::TenantId {
    db.list_all_boxes().unwrap()[0].tenant_id.clone()
}

#[tokio::test]
async fn sse_streams_stored_then_live_events_and_resumes_after_the_last_id() {
    let (server, _fake) = with_fake().await;
    create(&server, "alice").await;
    let (_, before) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    assert!(before["last_activity_at"].is_null(), "{before}");
    post(&server, "alice", json!({"content": "one"})).await;
    let stored = wait_events(&server, "alice", |e| count(e, "result") == 1).await;
    let last = stored.len() as u64;
    // The box's last activity is its newest event that is not a state change.
    let (_, after) = server.call(Method::GET, "/v1/boxes/alice", None).await;
    let newest = stored.iter().rev().find(|e| e["type"] != "state").unwrap();
    assert_eq!(after["last_activity_at"], newest["created_at"], "{after}");

    let (status, mut sse) = open_sse(&server, "/v1/boxes/alice/events", &[]).await;
    assert_eq!(status, StatusCode::OK);
    let mut seen: Vec<SseEvent> = Vec::new();
    while seen.len() < stored.len() {
        seen.push(sse.next().await);
    }
    for (event, json) in seen.iter().zip(&stored) {
        assert_eq!(event.id, json["seq"].as_u64().unwrap());
        assert_eq!(event.event, json["type"].as_str().unwrap());
        assert_eq!(&event.data, json, "data is the event JSON");
    }
    // Live: a new message's events arrive on the open stream.
    post(&server, "alice", json!({"content": "two"})).await;
    let live = loop {
        let event = sse.next().await;
        if event.event == "result" {
            break event;
        }
    };
    assert_eq!(live.data["data"]["result"], "two");
    assert!(live.id > last);

    for (path, headers) in [
        ("/v1/boxes/alice/events", vec![("last-event-id", "2")]),
        ("/v1/boxes/alice/events?after=2", vec![]),
    ] {
        let (status, mut resumed) = open_sse(&server, path, &headers).await;
        assert_eq!(status, StatusCode::OK);
        let ids: Vec<u64> = [resumed.next().await, resumed.next().await]
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(
            ids,
            vec![3, 4],
            "{path} {headers:?}: exactly the later events"
        );
    }
    let (status, _, body) = server
        .raw(
            Method::GET,
            "/v1/boxes/alice/events",
            Some(&server.key),
            &[("last-event-id", "seven")],
            Bytes::new(),
        )
        .await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (status, body) = server
        .call(
            Method::GET,
            "/v1/boxes/alice/events?after=x&wait=false",
            None,
        )
        .await;
    assert_eq!(
        (status, error_code(&body)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (status, page) = server
        .call(
            Method::GET,
            &format!("/v1/boxes/alice/events?after={last}&wait=false"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["events"][0]["seq"], last + 1);
}

#[tokio::test]
async fn a_box_whose_processes_died_is_woken_again_and_its_queue_drains() {
    let (server, fake) = with_fake().await;
    let id = create(&server, "alice").await;
    post(&server, "alice", json!({"content": "first"})).await;
    wait_delivered(&server, "alice", 1).await;
    fake.crash(&id);
    post(&server, "alice", json!({"content": "second"})).await;
    wait_delivered(&server, "alice", 2).await;
    assert_eq!(fake.harness.received(), vec!["first", "second"]);
    assert_eq!(fake.starts.load(Ordering::SeqCst), 2);
    let events = wait_events(&server, "alice", |e| count(e, "result") == 2).await;
    assert_gapless(&events);
    let stopped = events
        .iter()
        .filter(|e| e["type"] == "state" && e["data"]["state"] == "stopped")
        .count();
    assert_eq!(stopped, 1, "the crash is in the log: {events:?}");
}

#[tokio::test]
async fn messages_queued_while_no_box_could_start_are_delivered_after_a_restart() {
    let data = tempfile::tempdir().unwrap();
    let mut first = TestServer::start(Arc::new(NoBoxes), None, data).await;
    create(&first, "alice").await;
    for content in ["a", "b"] {
        let (status, _) = post(&first, "alice", json!({ "content": content })).await;
        assert_eq!(
            status,
            StatusCode::ACCEPTED,
            "accepted even though the box cannot start"
        );
    }
    first.shut_down().await;
    let data = std::mem::replace(&mut first.data, tempfile::tempdir().unwrap());
    drop(first);

    // The same runtime (a box keeps its runtime for life), now able to start boxes.
    let fake = Arc::new(FakeRuntime::named(data.path().to_owned(), "none"));
    let second = TestServer::start(fake.clone(), None, data).await;
    // Nobody calls: the daemon wakes the box for its queue at start.
    wait_delivered(&second, "alice", 2).await;
    assert_eq!(fake.harness.received(), vec!["a", "b"]);
}

#[tokio::test]
async fn a_restarted_daemon_reattaches_to_a_running_box() {
    let data = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime::new(data.path().to_owned()));
    let first = TestServer::start(fake.clone(), None, data).await;
    create(&first, "alice").await;
    post(&first, "alice", json!({"content": "a"})).await;
    wait_delivered(&first, "alice", 1).await;
    // The daemon dies without stopping anything (its task is aborted).
    let data = crash(first).await;

    let second = TestServer::start(fake.clone(), None, data).await;
    let (_, alice) = second.call(Method::GET, "/v1/boxes/alice", None).await;
    assert_eq!(alice["state"], "running", "reattached, not stopped");
    post(&second, "alice", json!({"content": "b"})).await;
    wait_delivered(&second, "alice", 2).await;
    assert_eq!(fake.harness.received(), vec!["a", "b"]);
    assert_eq!(fake.starts.load(Ordering::SeqCst), 1, "no second boot");
    let events = wait_events(&second, "alice", |e| count(e, "result") == 2).await;
    assert_gapless(&events);
    assert_eq!(count(&events, "user"), 2, "no event stored twice");
}

#[tokio::test]
async fn a_shutdown_ends_open_event_streams() {
    let (mut server, _fake) = with_fake().await;
    create(&server, "alice").await;
    post(&server, "alice", json!({"content": "one"})).await;
    let (status, mut sse) = open_sse(&server, "/v1/boxes/alice/events", &[]).await;
    assert_eq!(status, StatusCode::OK);
    sse.next().await;
    tokio::time::timeout(Duration::from_secs(20), server.shut_down())
        .await
        .expect("the daemon shuts down with a stream open");
}

#[tokio::test]
async fn concurrent_posts_get_every_seq_once() {
    let (server, fake) = with_fake().await;
    create(&server, "alice").await;
    let (clients, each) = (10, 50);
    let began = Instant::now();
    let posts = (0..clients).map(|c| {
        let server = &server;
        async move {
            let mut seqs = Vec::new();
            for i in 0..each {
                let (status, posted) =
                    post(server, "alice", json!({ "content": format!("{c}-{i}") })).await;
                assert_eq!(status, StatusCode::ACCEPTED, "{posted}");
                seqs.push(posted["seq"].as_u64().unwrap());
            }
            seqs
        }
    });
    let mut seqs: Vec<u64> = futures_util::future::join_all(posts)
        .await
        .into_iter()
        .flatten()
        .collect();
    let elapsed = began.elapsed();
    println!(
        "{} messages accepted over HTTP by {clients} clients in {:.0} ms: {:.0} messages/s",
        seqs.len(),
        elapsed.as_secs_f64() * 1000.0,
        seqs.len() as f64 / elapsed.as_secs_f64()
    );
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=(clients * each) as u64).collect::<Vec<_>>());
    wait_delivered(&server, "alice", clients * each).await;
    let received = fake.harness.received();
    assert_eq!(received.len(), clients * each, "each once");
    // Each client's messages reach the harness in the order it posted them.
    for c in 0..clients {
        let mine: Vec<&String> = received
            .iter()
            .filter(|m| m.starts_with(&format!("{c}-")))
            .collect();
        let expected: Vec<String> = (0..each).map(|i| format!("{c}-{i}")).collect();
        assert_eq!(mine, expected.iter().collect::<Vec<_>>());
    }
}
