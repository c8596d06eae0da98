//! The harness supervised: restarted after a crash with its session, failed after a crash
//! loop, bounded in what one line may cost, and timed out when it stops reading.

use std::time::{Duration, Instant};

use berth_protocol::harness::HarnessState;
use berth_protocol::ErrorCode;
use serde_json::json;

use super::common::{assert_contiguous, kinds, remote, results, Agent, BoxDirs};

#[tokio::test]
async fn a_crashed_harness_is_restarted_with_its_session() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    let agent = Agent::start(&dirs, &[]);
    agent.deliver("msg_1", "remember 42").await.unwrap();
    let first = agent.events_until(0, |e| results(e) == 1).await;
    let session = first.iter().find(|e| e.kind == "system").unwrap().data["session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // `crash` is replayed (taken), then the harness exits with status 3.
    agent.deliver("msg_2", "crash").await.unwrap();
    let last = first.last().unwrap().seq;
    let crash = agent
        .events_until(last, |e| kinds(e).contains(&"system"))
        .await;
    assert_contiguous(&crash);
    assert_eq!(
        kinds(&crash),
        ["user", "harness_exit", "harness_start", "system"]
    );
    assert_eq!(crash[1].data["code"], 3);
    assert_eq!(crash[1].data["restarts"], 1);
    assert_eq!(crash[2].data["resumed"], true);
    assert_eq!(crash[3].data["session_id"], session.as_str());
    let status = agent
        .wait_status("running", |s| s.state == HarnessState::Running)
        .await;
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", status.pid.unwrap())).unwrap();
    let args: Vec<_> = cmdline
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(args[1..], ["--resume".to_owned(), session.clone()]);
    // The resumed harness remembers the turn before the crash.
    agent.deliver("msg_3", "what did I say?").await.unwrap();
    let answer = agent
        .events_until(crash.last().unwrap().seq, |e| results(e) == 1)
        .await;
    assert_eq!(
        answer.last().unwrap().data["result"],
        "You said: remember 42"
    );
    // A completed turn resets the count of exits in a row.
    assert_eq!(
        agent.client.harness_status().await.unwrap().state,
        HarnessState::Running
    );
}

#[tokio::test]
async fn a_crash_loop_fails_the_harness_and_deliveries_are_refused() {
    let dirs = BoxDirs::new();
    let config = json!({"command": ["/bin/sh", "-c", "echo dying >&2; exit 1"], "max_restarts": 3});
    std::fs::write(dirs.path("run/harness.json"), config.to_string()).unwrap();
    let agent = Agent::start(&dirs, &[]);
    let status = agent
        .wait_status("failed", |s| s.state == HarnessState::Failed)
        .await;
    assert!(
        status.reason.as_deref().unwrap().contains("3 times"),
        "{status:?}"
    );
    let events = agent
        .events_until(0, |e| kinds(e).contains(&"harness_failed"))
        .await;
    assert_contiguous(&events);
    let exits = events.iter().filter(|e| e.kind == "harness_exit").count();
    assert_eq!(exits, 3);
    assert!(events.iter().any(|e| e.kind == "log"
        && e.data == json!({"stream":"stderr","line":"dying","truncated":false})));
    let err = agent.deliver("msg_1", "hi").await.unwrap_err();
    assert_eq!(remote(err), (503, ErrorCode::Unavailable));
    agent.client.info().await.unwrap();
}

#[tokio::test]
async fn a_box_without_a_harness_refuses_messages() {
    let dirs = BoxDirs::new();
    let agent = Agent::start(&dirs, &[]);
    let status = agent.client.harness_status().await.unwrap();
    assert_eq!(status.state, HarnessState::None);
    let err = agent.deliver("msg_1", "hi").await.unwrap_err();
    assert_eq!(remote(err), (503, ErrorCode::Unavailable));
    // Without a harness the state dir holds only the journals (the event journal also
    // carries background processes' exits), and no message was journalled.
    let messages = std::fs::read(dirs.path("state").join("messages.jsonl")).unwrap();
    assert!(
        messages.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&messages)
    );
}

fn rss_peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_ten_megabyte_line_is_truncated_and_memory_stays_small() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    let agent = Agent::start(&dirs, &[]);
    agent.deliver("msg_1", "flood 10000000").await.unwrap();
    let events = agent.events_until(0, |e| results(e) == 1).await;
    let logs: Vec<_> = events.iter().filter(|e| e.kind == "log").collect();
    assert_eq!(logs.len(), 1, "{logs:#?}");
    assert_eq!(logs[0].data["truncated"], true);
    assert_eq!(logs[0].data["line"].as_str().unwrap().len(), 4096);
    assert_eq!(
        events.last().unwrap().data["result"],
        "echo: flood 10000000"
    );
    let peak = rss_peak_kib(agent.pid());
    eprintln!("berth-init peak RSS after a 10 MB line: {peak} KiB");
    assert!(peak < 32 * 1024, "berth-init grew to {peak} KiB");
}

#[tokio::test]
async fn a_deaf_harness_times_out_deliveries_and_the_agent_stays_healthy() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({"ECHO_HARNESS_DEAF": "1"}), json!({}));
    let agent = Agent::start(&dirs, &["--deliver-timeout-ms", "400"]);
    agent
        .wait_status("running", |s| s.state == HarnessState::Running)
        .await;
    let started = Instant::now();
    let err = agent.deliver("msg_1", "hello?").await.unwrap_err();
    assert_eq!(remote(err), (504, ErrorCode::Timeout));
    assert!(started.elapsed() < Duration::from_secs(5));
    // The retry waits for the same message; it is not written again.
    let err = agent.deliver("msg_1", "hello?").await.unwrap_err();
    assert_eq!(remote(err), (504, ErrorCode::Timeout));
    let journal = std::fs::read_to_string(dirs.path("state/messages.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 1, "{journal}");
    agent.client.info().await.unwrap();
    let status = agent.client.harness_status().await.unwrap();
    assert_eq!(status.turns_in_flight, 1);
    assert_eq!(status.state, HarnessState::Running);
}
