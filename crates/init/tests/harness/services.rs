//! A template's services on the real agent: started in `after` order before the harness,
//! restarted by their policy, failed with their log tail when they keep failing (the
//! harness answering all the while), restarted on request, their logs followed, and stopped
//! gracefully in reverse order before the box stops.

use std::time::{Duration, Instant};

use berth_protocol::process::ProcessFrame;
use berth_protocol::service::{ServiceInfo, ServiceState};
use berth_protocol::ErrorCode;
use serde_json::{json, Value};

use super::common::{kinds, remote, results, Agent, BoxDirs};

/// A port nothing listens on now (tests run side by side on the host's loopback).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

fn sh(script: &str) -> Value {
    json!(["/bin/sh", "-c", script])
}

/// A Python server on `port` that listens only after `delay_s`, and writes `name` to
/// `stops` when SIGTERM ends it.
fn slow_server(name: &str, port: u16, delay_s: f64) -> Value {
    let program = format!(
        "import signal, socket, sys, time\n\
         def term(*_):\n    open('stops', 'a').write('{name}\\n'); sys.exit(0)\n\
         signal.signal(signal.SIGTERM, term)\n\
         time.sleep({delay_s})\n\
         s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         s.bind(('127.0.0.1', {port})); s.listen()\n\
         print('{name} listening', flush=True)\n\
         while True:\n    c, _ = s.accept(); c.close()\n"
    );
    json!(["/usr/bin/python3", "-c", program])
}

async fn service(agent: &Agent, name: &str) -> ServiceInfo {
    let list = agent.client.services().await.unwrap();
    list.services
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no service {name}"))
}

async fn wait_service(
    agent: &Agent,
    name: &str,
    what: &str,
    ok: impl Fn(&ServiceInfo) -> bool,
) -> ServiceInfo {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = service(agent, name).await;
        if ok(&info) {
            return info;
        }
        assert!(Instant::now() < deadline, "waiting for {what}: {info:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The whole log kept, from `offset`.
async fn log_of(agent: &Agent, name: &str, offset: u64) -> String {
    let mut stream = agent
        .client
        .service_logs(name, offset, false)
        .await
        .unwrap();
    let mut text = Vec::new();
    while let Some(frame) = stream.next_frame().await.unwrap() {
        if let ProcessFrame::Output { data, .. } = frame {
            text.extend_from_slice(&data);
        }
    }
    String::from_utf8_lossy(&text).into_owned()
}

/// Waits until the service's log holds `needle`.
async fn wait_log(agent: &Agent, name: &str, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = log_of(agent, name, 0).await;
        if log.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}'s log has no {needle:?}: {log}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn shut_down(mut agent: Agent) {
    agent.client.shutdown().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while agent.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "berth-init did not exit");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn services_start_in_order_before_the_harness_and_stop_gracefully_in_reverse() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    let port = free_port();
    let app = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}))\" && echo app saw db; \
         trap 'echo app >> stops; exit 0' TERM; while :; do sleep 0.05; done"
    );
    dirs.services(json!([
        {"name": "app", "command": sh(&app), "after": ["db"]},
        {"name": "db", "command": slow_server("db", port, 0.5), "ready": {"port": port}},
    ]));
    let agent = Agent::start(&dirs, &[]);
    let db = wait_service(&agent, "db", "db to be ready", |s| {
        s.state == ServiceState::Running
    })
    .await;
    let app = wait_service(&agent, "app", "app to run", |s| {
        s.state == ServiceState::Running
    })
    .await;
    let (db_ready, app_started) = (db.ready_at_ms.unwrap(), app.started_at_ms.unwrap());
    assert!(
        db_ready <= app_started,
        "app started at {app_started}, before db was ready at {db_ready}"
    );
    wait_log(&agent, "app", "app saw db\n").await;
    wait_log(&agent, "db", "db listening\n").await;
    // The harness came after both.
    let events = agent
        .events_until(0, |e| kinds(e).contains(&"harness_start"))
        .await;
    let harness_start = events.iter().find(|e| e.kind == "harness_start").unwrap();
    assert!(
        harness_start.at_ms >= app.ready_at_ms.unwrap(),
        "the harness started at {}, app was ready at {}",
        harness_start.at_ms,
        app.ready_at_ms.unwrap()
    );
    shut_down(agent).await;
    // Both SIGTERM handlers ran, the dependent's first.
    let stops = std::fs::read_to_string(dirs.path("home/stops")).unwrap();
    assert_eq!(stops, "app\ndb\n");
}

#[tokio::test]
async fn a_killed_service_is_restarted_and_one_that_keeps_failing_is_failed_while_the_harness_answers(
) {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    dirs.services(json!([
        {"name": "steady", "command": sh("echo up; exec sleep 1000"), "keep_awake": true},
        // Never ready, so what comes after it waits, and fails with it.
        {"name": "broken", "command": sh("echo boom >&2; exit 3"), "max_restarts": 2,
         "ready": {"command": ["/bin/false"]}},
        {"name": "needs-broken", "command": sh("exec sleep 1000"), "after": ["broken"]},
        {"name": "once", "command": sh("echo done"), "restart": "never"},
        {"name": "never-ready", "command": sh("exec sleep 1000"), "ready": {"port": free_port()},
         "ready_timeout_s": 1, "restart": "never"},
    ]));
    let agent = Agent::start(&dirs, &[]);
    let first = wait_service(&agent, "steady", "steady to run", |s| {
        s.state == ServiceState::Running
    })
    .await;
    assert_eq!(agent.client.busy().await.unwrap().services, 1);
    // SAFETY: SIGKILL to the service's own pid.
    unsafe { libc::kill(first.pid.unwrap() as i32, libc::SIGKILL) };
    let again = wait_service(&agent, "steady", "steady to come back", |s| {
        s.state == ServiceState::Running && s.restarts == 1
    })
    .await;
    assert_ne!(again.pid, first.pid);
    assert_eq!(again.last_exit.unwrap().signal, Some(9));
    wait_log(&agent, "steady", "killed by signal 9; restarting in").await;
    let log = log_of(&agent, "steady", 0).await;
    assert_eq!(log.matches("up\n").count(), 2, "{log}");
    assert!(log.contains("killed by signal 9; restarting in"), "{log}");

    let broken = wait_service(&agent, "broken", "broken to fail", |s| {
        s.state == ServiceState::Failed
    })
    .await;
    assert_eq!(broken.restarts, 2);
    assert_eq!(broken.last_exit.unwrap().code, Some(3));
    assert!(broken
        .reason
        .as_deref()
        .unwrap()
        .contains("3 times in a row"));
    let tail = broken.log_tail.unwrap();
    assert_eq!(tail.matches("boom\n").count(), 3, "{tail}");
    assert!(tail.contains("berth-init: failed:"), "{tail}");
    let dependent = wait_service(&agent, "needs-broken", "its dependent to fail", |s| {
        s.state == ServiceState::Failed
    })
    .await;
    assert_eq!(
        dependent.reason.as_deref(),
        Some("broken, which it comes after, failed")
    );
    assert_eq!(dependent.started_at_ms, None, "it never started");
    let once = wait_service(&agent, "once", "once to end", |s| {
        s.state == ServiceState::Exited
    })
    .await;
    assert_eq!(once.last_exit.unwrap().code, Some(0));
    let never = wait_service(&agent, "never-ready", "never-ready to fail", |s| {
        s.state == ServiceState::Failed
    })
    .await;
    assert!(
        never
            .reason
            .as_deref()
            .unwrap()
            .contains("(restart = never)"),
        "{never:?}"
    );
    assert!(never.log_tail.unwrap().contains("not ready within 1 s"));

    // The box and its harness go on; the failure is on the event stream.
    agent.deliver("msg_1", "still there?").await.unwrap();
    let events = agent.events_until(0, |e| results(e) == 1).await;
    let failed: Vec<&str> = events
        .iter()
        .filter(|e| e.kind == "service_failed")
        .map(|e| e.data["name"].as_str().unwrap())
        .collect();
    for name in ["broken", "needs-broken", "never-ready"] {
        assert!(failed.contains(&name), "{failed:?}");
    }
    let event = events
        .iter()
        .find(|e| e.kind == "service_failed" && e.data["name"] == "broken")
        .unwrap();
    assert!(event.data["log_tail"].as_str().unwrap().contains("boom"));
    assert_eq!(event.data["last_exit"]["code"], 3);
}

#[tokio::test]
async fn a_restart_asked_for_starts_a_new_life_and_logs_follow_across_lives() {
    let dirs = BoxDirs::new();
    dirs.services(json!([
        {"name": "ticker", "command": sh("echo life; exec sleep 1000")},
        {"name": "broken", "command": sh("echo boom; exit 1"), "max_restarts": 0},
        {"name": "ghost", "command": sh("true"), "after": ["nobody"]},
    ]));
    let agent = Agent::start(&dirs, &[]);
    wait_service(&agent, "ticker", "ticker to run", |s| {
        s.state == ServiceState::Running
    })
    .await;
    wait_log(&agent, "ticker", "life\n").await;
    let first = service(&agent, "ticker").await;
    let end = first.log_end;
    let mut follow = agent
        .client
        .service_logs("ticker", end, true)
        .await
        .unwrap();
    let restarted = agent.client.service_restart("ticker").await.unwrap();
    assert_eq!(restarted.restarts, 1);
    assert_ne!(restarted.pid, first.pid);
    assert!(restarted.pid.is_some(), "{restarted:?}");
    // The follower sees the new life's output, from where it started reading.
    let mut seen = String::new();
    let mut first_offset = None;
    let new_life = |seen: &str| {
        seen.split_once("restart asked for")
            .is_some_and(|(_, after)| after.contains("life\n"))
    };
    while !new_life(&seen) {
        let frame = tokio::time::timeout(Duration::from_secs(10), follow.next_frame())
            .await
            .expect("no output after the restart")
            .unwrap()
            .unwrap();
        if let ProcessFrame::Output { offset, data, .. } = frame {
            first_offset.get_or_insert(offset);
            seen.push_str(&String::from_utf8_lossy(&data));
        }
    }
    assert_eq!(first_offset, Some(end));
    // A failed service runs again when asked.
    wait_service(&agent, "broken", "broken to fail", |s| {
        s.state == ServiceState::Failed
    })
    .await;
    agent.client.service_restart("broken").await.unwrap();
    let broken = wait_service(&agent, "broken", "broken to fail again", |s| {
        s.state == ServiceState::Failed && s.restarts == 1
    })
    .await;
    assert_eq!(broken.log_tail.unwrap().matches("boom\n").count(), 2);
    // A refused one says why; an unknown name is 404.
    let ghost = service(&agent, "ghost").await;
    assert_eq!(ghost.state, ServiceState::Failed);
    assert!(ghost.reason.unwrap().contains("\"nobody\""));
    assert_eq!(
        remote(agent.client.service_restart("ghost").await.unwrap_err()),
        (409, ErrorCode::Conflict)
    );
    assert_eq!(
        remote(agent.client.service_restart("nope").await.unwrap_err()),
        (404, ErrorCode::NotFound)
    );
    // Only the last bytes from an offset near the end.
    let log_end = service(&agent, "ticker").await.log_end;
    assert_eq!(log_of(&agent, "ticker", log_end - 5).await, "life\n");
    assert_eq!(agent.client.busy().await.unwrap().services, 0);
    shut_down(agent).await;
}

#[tokio::test]
async fn a_service_that_ignores_sigterm_is_killed_after_its_stop_timeout() {
    let dirs = BoxDirs::new();
    dirs.services(json!([
        {"name": "stubborn", "command": sh("trap '' TERM; echo $$ > pid; while :; do sleep 0.05; done"),
         "stop_timeout_s": 1},
    ]));
    let agent = Agent::start(&dirs, &[]);
    wait_service(&agent, "stubborn", "stubborn to run", |s| {
        s.state == ServiceState::Running
    })
    .await;
    let started = Instant::now();
    shut_down(agent).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1),
        "it had its 1 s to stop: {took:?}"
    );
    let pid: i32 = std::fs::read_to_string(dirs.path("home/pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signal 0 only checks the pid exists.
    assert_ne!(
        unsafe { libc::kill(pid, 0) },
        0,
        "the service outlived the box"
    );
}
