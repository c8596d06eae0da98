//! Webhooks against a real `berth up`: a receiver on loopback (allowed by `[webhooks]
//! allow_endpoints`) checks every signature with its own HMAC and sees each event of a
//! scripted box life exactly once (deduplicated by `webhook-id`, as Standard Webhooks
//! receivers do), across a daemon SIGKILL while it was down; private URLs and redirects
//! are refused.

mod common;
mod webhooks {
    pub mod receiver;
}

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::{e2e_skip_reason, stderr, Daemon};
use serde_json::Value;
use webhooks::receiver::Receiver;

/// Waits until `done` holds, polling; fails naming `what` after `within`.
fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn deliveries(daemon: &Daemon, id: &str) -> Vec<Value> {
    let list = json(&daemon.berth_ok(&["webhook", "deliveries", id, "--limit", "500", "--json"]));
    list["deliveries"].as_array().unwrap().clone()
}

/// What the box's own log says the receiver must have been told: `(event, seq)`.
fn expected_from_log(daemon: &Daemon, name: &str) -> BTreeSet<(String, u64)> {
    let mut expected = BTreeSet::new();
    for line in daemon.berth_ok(&["logs", name, "--json"]).lines() {
        let event = json(line);
        let seq = event["seq"].as_u64().unwrap();
        let names: &[&str] = match event["type"].as_str().unwrap() {
            "state"
                if !event["data"]["failure"].is_null() || event["data"]["state"] == "failed" =>
            {
                &["box.state_changed", "box.failed"]
            }
            "state" => &["box.state_changed"],
            "result" | "turn_timeout" => &["turn.completed"],
            "process_exit" => &["process.exited"],
            _ => &[],
        };
        expected.extend(names.iter().map(|n| (n.to_string(), seq)));
    }
    expected
}

#[test]
fn a_receiver_sees_every_event_of_a_box_life_once_across_a_crash_and_its_own_downtime() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", reason);
        return;
    }
    let mut receiver = Receiver::start();
    let config = format!(
        "[webhooks]\nallow_endpoints = [\"http://127.0.0.1:{}\"]\nfirst_retry_s = 1\nmax_retry_s = 2\n",
        receiver.port
    );
    let mut daemon = Daemon::start_with_config(&config);

    // Refused at once: plain http to an origin not allowed, a private address, no events.
    for (url, needle) in [
        ("http://127.0.0.1:1/in", "https"),
        ("https://127.0.0.1/in", "127.0.0.1"),
        ("https://10.0.0.1/in", "10.0.0.1"),
    ] {
        let out = daemon.berth(&["webhook", "add", url, "--event", "box.failed"]);
        assert!(!out.status.success(), "{url} was accepted");
        assert!(stderr(&out).contains(needle), "{url}: {}", stderr(&out));
    }
    let out = daemon.berth(&[
        "webhook",
        "add",
        &receiver.url("/in"),
        "--event",
        "box.exploded",
    ]);
    assert!(stderr(&out).contains("box.exploded"), "{}", stderr(&out));

    // A name that resolves to the host's own network is refused when it is dialled.
    let local = json(&daemon.berth_ok(&[
        "webhook",
        "add",
        "https://localhost/in",
        "--event",
        "box.failed",
        "--json",
    ]));
    let id = local["id"].as_str().unwrap();
    let out = daemon.berth(&["webhook", "test", id]);
    assert!(!out.status.success());
    assert!(
        common::stdout(&out).contains("refused"),
        "{}",
        common::stdout(&out)
    );
    daemon.berth_ok(&["webhook", "rm", id]);

    // A redirect is an answer, never followed.
    let redirecting = json(&daemon.berth_ok(&[
        "webhook",
        "add",
        &receiver.url("/redirect"),
        "--event",
        "box.failed",
        "--json",
    ]));
    receiver.set_secret(redirecting["secret"].as_str().unwrap());
    let id = redirecting["id"].as_str().unwrap();
    let out = daemon.berth(&["webhook", "test", id]);
    assert!(
        common::stdout(&out).contains("307"),
        "{}",
        common::stdout(&out)
    );
    assert!(receiver.received().iter().all(|r| r.path != "/followed"));
    assert!(receiver
        .received()
        .iter()
        .any(|r| r.path == "/redirect" && r.signature_ok));
    daemon.berth_ok(&["webhook", "rm", id]);

    // The webhook under test, and a box life.
    let added = json(&daemon.berth_ok(&[
        "webhook",
        "add",
        &receiver.url("/in"),
        "--event",
        "box.state_changed,box.failed,turn.completed",
        "--event",
        "process.exited",
        "--json",
    ]));
    receiver.set_secret(added["secret"].as_str().unwrap());
    let hook = added["id"].as_str().unwrap().to_owned();
    assert!(daemon.berth_ok(&["webhook", "ls"]).contains(&hook));
    daemon.berth_ok(&["box", "create", "life", "--template", "echo"]);
    let answer = daemon.berth_ok(&["send", "life", "remember 42"]);
    assert!(answer.contains("42"), "{answer}");
    daemon.berth_ok(&["exec", "--background", "life", "--", "sh", "-c", "exit 3"]);
    wait_until(
        "the process.exited delivery",
        Duration::from_secs(60),
        || {
            receiver
                .received()
                .iter()
                .any(|r| r.body["type"] == "process.exited")
        },
    );

    // The receiver goes down; a turn ends meanwhile, and its attempts fail and are retried.
    receiver.down();
    daemon.berth_ok(&["send", "life", "hello"]);
    let waiter = "while [ ! -e /tmp/go ]; do sleep 0.05; done; exit 4";
    daemon.berth_ok(&["exec", "--background", "life", "--", "sh", "-c", waiter]);
    wait_until("a failed attempt", Duration::from_secs(60), || {
        deliveries(&daemon, &hook)
            .iter()
            .any(|d| d["state"] == "pending" && d["attempts"].as_u64() >= Some(1))
    });
    // The daemon dies while deliveries wait, and the box runs on with its process, which
    // ends after the restart.
    daemon.crash_and_restart();
    daemon.berth_ok(&["exec", "life", "--", "touch", "/tmp/go"]);
    wait_until(
        "the process's exit in the log",
        Duration::from_secs(60),
        || {
            daemon.berth_ok(&["logs", "life"]).contains("process_exit")
                && expected_from_log(&daemon, "life")
                    .iter()
                    .filter(|(event, _)| event == "process.exited")
                    .count()
                    == 2
        },
    );
    daemon.berth_ok(&["box", "stop", "life"]);
    let answer = daemon.berth_ok(&["send", "life", "what did I say?"]);
    assert!(answer.contains("42"), "{answer}");
    daemon.berth_ok(&["box", "stop", "life"]);
    daemon.wait_for_box("life", Duration::from_secs(30), |b| b["state"] == "stopped");

    receiver.up();
    let expected = expected_from_log(&daemon, "life");
    wait_until("every delivery answered", Duration::from_secs(120), || {
        deliveries(&daemon, &hook)
            .iter()
            .all(|d| d["state"] == "delivered")
            && receiver
                .received()
                .iter()
                .filter(|r| r.path == "/in")
                .count()
                >= expected.len()
    });

    let received: Vec<_> = receiver
        .received()
        .into_iter()
        .filter(|r| r.path == "/in")
        .collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for r in &received {
        assert!(r.signature_ok, "a bad signature: {r:?}");
        assert!((now - r.timestamp).abs() < 600, "a stale timestamp: {r:?}");
        assert_eq!(r.body["data"]["box"]["name"], "life", "{r:?}");
    }
    // Deduplicated by webhook-id: each event of the log under exactly one id.
    let mut by_event: BTreeMap<(String, u64), BTreeSet<String>> = BTreeMap::new();
    for r in &received {
        let key = (
            r.body["type"].as_str().unwrap().to_owned(),
            r.body["data"]["seq"].as_u64().unwrap(),
        );
        by_event.entry(key).or_default().insert(r.id.clone());
    }
    let seen: BTreeSet<(String, u64)> = by_event.keys().cloned().collect();
    eprintln!(
        "{} deliveries received for {} events: {seen:?}",
        received.len(),
        expected.len()
    );
    assert_eq!(seen, expected, "what the receiver saw, and the box's log");
    for (event, ids) in &by_event {
        assert_eq!(
            ids.len(),
            1,
            "{event:?} came as several deliveries: {ids:?}"
        );
    }
    let states: Vec<&str> = received
        .iter()
        .filter(|r| r.body["type"] == "box.state_changed")
        .filter_map(|r| r.body["data"]["state"].as_str())
        .collect();
    assert!(
        states.contains(&"running") && states.contains(&"stopped"),
        "{states:?}"
    );
    assert!(received.iter().any(|r| r.body["type"] == "turn.completed"
        && r.body["data"]["answer"]
            .as_str()
            .is_some_and(|a| a.contains("42"))));
    let exit = received
        .iter()
        .find(|r| r.body["type"] == "process.exited")
        .unwrap();
    assert_eq!(exit.body["data"]["status"], 3, "{exit:?}");

    daemon.berth_ok(&["box", "rm", "life"]);
    daemon.berth_ok(&["webhook", "rm", &hook]);
    assert!(daemon.berth_ok(&["webhook", "ls", "--json"]).contains("[]"));
}
