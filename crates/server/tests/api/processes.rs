//! Background processes through the API on a real sandbox box: started with
//! `"background": true`, followed from an offset, fed on stdin, signalled, their exit an
//! event; a running one keeps the box awake unless it asked not to.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{json, Value};

use crate::end_to_end::with_sandbox;
use crate::harness::TestServer;
use crate::idle::{stays, wait_state};

async fn create(server: &TestServer, body: Value) {
    let (status, created) = server.call(Method::POST, "/v1/boxes", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
}

async fn start(server: &TestServer, body: Value) -> Value {
    let (status, started) = server
        .call(Method::POST, "/v1/boxes/p1/exec", Some(body))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    started
}

/// The NDJSON frames of a process's output from `offset` to its exit frame.
async fn output(server: &TestServer, id: &str, offset: u64) -> Vec<Value> {
    let path = format!("/v1/boxes/p1/processes/{id}/output?offset={offset}");
    let key = server.key.clone();
    let (status, _, body) = server
        .raw(Method::GET, &path, Some(&key), &[], Bytes::new())
        .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    body.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

fn decoded(frames: &[Value], stream: &str) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "output" && f["stream"] == stream)
        .map(|f| {
            let frame: berth_protocol::process::ProcessFrame =
                serde_json::from_value(f.clone()).unwrap();
            match frame {
                berth_protocol::process::ProcessFrame::Output { data, .. } => {
                    String::from_utf8(data).unwrap()
                }
                other => panic!("{other:?}"),
            }
        })
        .collect()
}

#[tokio::test]
async fn a_background_process_is_followed_fed_and_signalled_and_its_exit_is_an_event() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    create(&server, json!({"name": "p1"})).await;
    let started = start(
        &server,
        json!({"cmd": ["sh", "-c", "echo hello; read line; echo got:$line >&2; exit 3"],
               "background": true, "open_stdin": true}),
    )
    .await;
    let id = started["id"].as_str().unwrap().to_owned();
    assert!(
        id.starts_with("pr_") && started["stdin_open"] == true,
        "{started}"
    );
    let key = server.key.clone();
    let (status, _, body) = server
        .raw(
            Method::POST,
            &format!("/v1/boxes/p1/processes/{id}/stdin?close=true"),
            Some(&key),
            &[],
            Bytes::from_static(b"typed\n"),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NO_CONTENT,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let frames = output(&server, &id, 0).await;
    assert_eq!(decoded(&frames, "stdout"), "hello\n");
    assert_eq!(decoded(&frames, "stderr"), "got:typed\n");
    let exit = frames.last().unwrap();
    assert_eq!(
        (exit["type"].as_str(), exit["code"].as_i64()),
        (Some("exit"), Some(3))
    );
    // From an offset: only what follows it.
    let later = output(&server, &id, 6).await;
    assert_eq!(decoded(&later, "stdout"), "");
    assert_eq!(later[0]["offset"], 6);

    let (status, listed) = server
        .call(Method::GET, "/v1/boxes/p1/processes", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["processes"][0]["exit"]["code"], 3, "{listed}");

    let sleeper = start(
        &server,
        json!({"cmd": ["sleep", "300"], "background": true}),
    )
    .await;
    let sleeper = sleeper["id"].as_str().unwrap();
    let (status, _) = server
        .call(
            Method::POST,
            &format!("/v1/boxes/p1/processes/{sleeper}/signal"),
            Some(json!({"signal": "KILL"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let frames = output(&server, sleeper, 0).await;
    assert_eq!(frames.last().unwrap()["signal"], 9);

    // Both exits are events of the box.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, page) = server
            .call(Method::GET, "/v1/boxes/p1/events?wait=false", None)
            .await;
        let exits: Vec<&Value> = page["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["type"] == "process_exit")
            .collect();
        if exits.len() == 2 {
            assert_eq!(exits[0]["data"]["id"], id.as_str());
            assert_eq!(exits[0]["data"]["status"], 3);
            assert_eq!(exits[1]["data"]["status"], 137);
            break;
        }
        assert!(Instant::now() < deadline, "no process_exit events: {page}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Bad requests are clear.
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes/p1/exec",
            Some(json!({"cmd": ["true"], "open_stdin": true})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = server
        .call(Method::GET, "/v1/boxes/p1/processes/pr_nosuch/output", None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

#[tokio::test]
async fn a_running_background_process_keeps_the_box_awake_unless_it_asked_not_to() {
    let Some(server) = with_sandbox().await else {
        return;
    };
    create(&server, json!({"name": "p1", "stop_after_s": 1})).await;
    let awake = start(
        &server,
        json!({"cmd": ["sleep", "600"], "background": true}),
    )
    .await;
    stays(&server, "p1", "running", Duration::from_secs(4)).await;
    let (status, _) = server
        .call(
            Method::POST,
            &format!(
                "/v1/boxes/p1/processes/{}/signal",
                awake["id"].as_str().unwrap()
            ),
            Some(json!({"signal": "TERM"})),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    start(
        &server,
        json!({"cmd": ["sleep", "600"], "background": true, "keep_awake": false}),
    )
    .await;
    wait_state(&server, "p1", "stopped", Duration::from_secs(60)).await;
    // The stopped box has no processes, and listing them does not wake it.
    let (status, listed) = server
        .call(Method::GET, "/v1/boxes/p1/processes", None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(listed["processes"], json!([]));
    assert_eq!(crate::idle::state(&server, "p1").await, "stopped");
}
