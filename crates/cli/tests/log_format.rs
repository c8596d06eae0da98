//! `berth up --log-format json` against a real daemon: every line on stderr is one JSON
//! object (timestamp, level, target, fields), every line logged while a request is served
//! carries that request's `request_id` (the `X-Request-Id` the client got back) and, once
//! the request found its box, the box's `box_id`: in the handler, and in the lifecycle
//! tasks and blocking work a wake runs. A client's `X-Request-Id` is kept when it is a
//! plain token, replaced when it is not.

mod common;

use std::time::{Duration, Instant};

use common::{e2e_skip_reason, raw_request, Daemon};
use serde_json::Value;

/// One HTTP/1.1 request with the admin key: the status, the `X-Request-Id` answered, the body.
fn call(
    daemon: &Daemon,
    method: &str,
    path: &str,
    request_id: Option<&str>,
    body: &str,
) -> (u16, String, String) {
    let (authority, key) = daemon.api_endpoint();
    let auth = format!("Bearer {key}");
    let mut headers = vec![("Authorization", auth.as_str())];
    headers.extend(request_id.map(|id| ("X-Request-Id", id)));
    let answer = raw_request(&authority, method, path, &headers, body);
    let ids = answer.header_values("x-request-id");
    assert_eq!(ids.len(), 1, "one X-Request-Id in {:?}", answer.headers);
    (answer.status, ids[0].to_owned(), answer.body)
}

/// Every line of the daemon's stderr, each parsed as a JSON object (the test fails on one
/// that is not).
fn json_lines(daemon: &Daemon) -> Vec<Value> {
    let log = std::fs::read_to_string(&daemon.log).unwrap();
    assert!(!log.is_empty(), "nothing logged");
    log.lines()
        .map(|line| {
            let value: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}\n{log}"));
            assert!(value.is_object(), "not an object: {line}");
            for field in ["timestamp", "level", "target"] {
                assert!(value[field].is_string(), "no {field}: {line}");
            }
            assert!(value["fields"]["message"].is_string(), "no message: {line}");
            value
        })
        .collect()
}

/// The lines logged in the span of request `id`, waiting up to 10 s for the request's own
/// line (written after the answer went out).
fn lines_of(daemon: &Daemon, id: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let lines: Vec<Value> = json_lines(daemon)
            .into_iter()
            .filter(|l| l["span"]["request_id"] == id)
            .collect();
        if lines.iter().any(|l| l["fields"]["message"] == "request") {
            return lines;
        }
        assert!(
            Instant::now() < deadline,
            "no request line of {id}:\n{}",
            daemon.logs()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn messages(lines: &[Value]) -> Vec<&str> {
    lines
        .iter()
        .map(|l| l["fields"]["message"].as_str().unwrap())
        .collect()
}

#[test]
fn json_logs_carry_each_requests_id_and_its_box() {
    let daemon = Daemon::start_in(
        tempfile::tempdir().unwrap(),
        None,
        &["--log-format".as_ref(), "json".as_ref()],
    );

    // A client's plain id is kept and carried by the lines of its request.
    let (status, id, body) = call(
        &daemon,
        "POST",
        "/v1/boxes",
        Some("create-1"),
        r#"{"name":"logged"}"#,
    );
    assert_eq!(status, 201, "{body}");
    assert_eq!(id, "create-1");
    let created: Value = serde_json::from_str(&body).unwrap();
    let box_id = created["id"].as_str().unwrap();
    let lines = lines_of(&daemon, &id);
    assert!(messages(&lines).contains(&"box created"), "{lines:?}");
    for line in &lines {
        assert_eq!(
            line["span"]["box_id"], box_id,
            "the box in every line after it was made: {line}"
        );
    }

    // One that could forge log fields is replaced by a fresh id, which the answer says.
    let forged = "x\" level=ERROR";
    let (status, id, _) = call(&daemon, "GET", "/v1/boxes/logged", Some(forged), "");
    assert_eq!(status, 200);
    assert!(id.starts_with("req_") && id.len() == 28, "{id}");
    let lines = lines_of(&daemon, &id);
    assert!(
        lines.iter().all(|l| l["span"]["box_id"] == box_id),
        "{lines:?}"
    );
    assert!(!std::fs::read_to_string(&daemon.log)
        .unwrap()
        .contains("level=ERROR"));

    // A request without a box carries its id, and no box.
    let (status, id, _) = call(&daemon, "GET", "/v1/boxes", None, "");
    assert_eq!(status, 200);
    let lines = lines_of(&daemon, &id);
    assert!(
        lines.iter().all(|l| l["span"].get("box_id").is_none()),
        "{lines:?}"
    );

    // A call that wakes the box: the wake runs in tasks and threads of its own, and their
    // lines carry the request too.
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", format!("the wake half of this test: {reason}"));
    } else {
        let (status, id, body) = call(
            &daemon,
            "POST",
            "/v1/boxes/logged/exec",
            None,
            r#"{"cmd":["echo","hi"]}"#,
        );
        assert_eq!(status, 200, "{body}");
        let lines = lines_of(&daemon, &id);
        let said = messages(&lines);
        assert!(said.contains(&"box started"), "the boot's line: {said:?}");
        assert!(
            lines
                .iter()
                .any(|l| l["target"].as_str().unwrap().starts_with("berth_runtime")),
            "a line of the runtime's blocking work: {said:?}"
        );
        for line in &lines {
            assert_eq!(line["span"]["box_id"], box_id, "{line}");
        }
    }
    // Every line so far, the daemon's start included, was one JSON object.
    let all = json_lines(&daemon);
    assert!(all
        .iter()
        .any(|l| l["fields"]["message"] == "berth listening"));
}
