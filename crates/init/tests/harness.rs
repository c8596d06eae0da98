//! The harness, end to end: the real `berth-init` (as root, not PID 1, with temporary
//! `--run-dir`/`--state-dir`/`--home`/`--memory`) runs the real `echo-harness`
//! (`ECHO_HARNESS_BIN`, built by `make init`) and is driven with the host's own client.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use berth_protocol::harness::{GuestEvent, HarnessState};
use berth_protocol::ErrorCode;
use serde_json::json;

#[path = "harness/common.rs"]
mod common;
#[path = "harness/message_ids.rs"]
mod message_ids;
#[path = "harness/services.rs"]
mod services;
#[path = "harness/supervision.rs"]
mod supervision;

use common::{assert_contiguous, kinds, remote, results, Agent, BoxDirs};

/// The harness gets base < box (`env.json`) < its config's `env`, egress settings included.
#[tokio::test]
async fn the_harness_gets_the_layered_environment() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({"LANG": "cfg"}), json!({}));
    std::fs::write(
        dirs.path("run/env.json"),
        r#"{"ANTHROPIC_API_KEY":"berth-ph-h","LANG":"box","NO_PROXY":"box"}"#,
    )
    .unwrap();
    let agent = Agent::start(&dirs, &[]);
    assert!(!dirs.path("run/env.json").exists());
    let status = agent
        .wait_status("the harness to run", |s| s.pid.is_some())
        .await;
    let environ = std::fs::read(format!("/proc/{}/environ", status.pid.unwrap())).unwrap();
    let vars: Vec<&[u8]> = environ.split(|&b| b == 0).collect();
    for wanted in [
        &b"ANTHROPIC_API_KEY=berth-ph-h"[..],
        b"LANG=cfg",
        b"NO_PROXY=box",
        b"HTTPS_PROXY=http://127.0.0.1:3128",
        b"REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt",
    ] {
        assert!(
            vars.contains(&wanted),
            "{} missing",
            String::from_utf8_lossy(wanted)
        );
    }
}

#[tokio::test]
async fn a_message_is_answered_once_in_order() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    let agent = Agent::start(&dirs, &[]);
    let info = agent.client.info().await.unwrap();
    let phases: Vec<_> = info.phases.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(
        phases,
        ["mount", "seal", "volume", "egress", "harness", "services", "serve"]
    );
    assert!(!agent.deliver("msg_1", "hello").await.unwrap());
    let events = agent.events_until(0, |e| results(e) == 1).await;
    assert_contiguous(&events);
    assert_eq!(events[0].seq, 1);
    assert_eq!(
        kinds(&events),
        ["harness_start", "system", "user", "assistant", "result"]
    );
    assert_eq!(events[0].data["resumed"], false);
    assert_eq!(events[2].data["message"]["content"], "hello");
    assert_eq!(
        events[3].data["message"]["content"][0]["text"],
        "echo: hello"
    );
    assert_eq!(events[4].data["result"], "echo: hello");
    // The same id again: a duplicate, never written twice.
    assert!(agent.deliver("msg_1", "hello").await.unwrap());
    let status = agent
        .wait_status("the turn to end", |s| s.turns_in_flight == 0)
        .await;
    assert_eq!(status.state, HarnessState::Running);
    assert_eq!(status.last_seq, 5);
    assert_eq!(dirs.transcript_user_lines(), ["hello"]);
    let timeline = std::fs::read_dir(dirs.path("memory/timeline"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name() != "README.md")
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect::<String>();
    assert_eq!(timeline, "- user: hello\n- assistant: echo: hello\n");
    // The journals are root-only on the volume.
    let mode = std::fs::metadata(dirs.path("state"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[tokio::test]
async fn a_killed_agent_keeps_its_sequence_and_resends_what_was_not_taken() {
    let dirs = BoxDirs::new();
    // First boot: a harness that never reads, so the message is written, not taken.
    dirs.harness(json!({"ECHO_HARNESS_DEAF": "1"}), json!({}));
    let mut first = Agent::start(&dirs, &["--deliver-timeout-ms", "300"]);
    first
        .events_until(0, |e| kinds(e).contains(&"system"))
        .await;
    let err = first.deliver("msg_a", "remember 7").await.unwrap_err();
    assert_eq!(remote(err), (504, ErrorCode::Timeout));
    let before = first.client.harness_status().await.unwrap();
    assert_eq!(before.turns_in_flight, 1);
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    dirs.kill_strays();
    drop(first);

    // Second boot on the same volume: the message goes first, exactly once.
    dirs.harness(json!({}), json!({}));
    let second = Agent::start(&dirs, &[]);
    second.deliver("msg_a", "remember 7").await.unwrap();
    assert!(!second.deliver("msg_b", "hi").await.unwrap());
    let events = second.events_until(0, |e| results(e) == 2).await;
    assert_contiguous(&events);
    assert_eq!(events[0].seq, 1);
    let starts: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "harness_start")
        .collect();
    assert_eq!(starts.len(), 2);
    assert_eq!(starts[1].data["resumed"], true);
    assert!(starts[1].seq > before.last_seq);
    let replays: Vec<_> = events
        .iter()
        .filter(|e| e.kind == "user")
        .map(|e| e.data["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(replays, ["remember 7", "hi"]);
    assert_eq!(dirs.transcript_user_lines(), ["remember 7", "hi"]);

    // The host has stored up to `mid`: those are dropped, the rest streams from mid + 1,
    // and the numbering survives another kill even with the journal cut.
    let last = events.last().unwrap().seq;
    let mid = last - 2;
    let rest = second.events_until(mid, |e| e.len() == 2).await;
    assert_eq!(rest[0].seq, mid + 1);
    let on_disk = std::fs::read_to_string(dirs.path("state/events.jsonl")).unwrap();
    let first_on_disk: GuestEvent = serde_json::from_str(on_disk.lines().next().unwrap()).unwrap();
    assert_eq!(first_on_disk.seq, mid + 1);
    let mut second = second;
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    dirs.kill_strays();
    drop(second);
    let mut third = Agent::start(&dirs, &[]);
    let after = third
        .events_until(last, |e| kinds(e).contains(&"system"))
        .await;
    assert_eq!(after[0].seq, last + 1);
    assert_eq!(after[0].kind, "harness_start");
    // Everything stored: the journal is cut to nothing, and the numbering still goes on.
    let end = after.last().unwrap().seq;
    third.events_until(end, |_| true).await;
    assert_eq!(
        std::fs::read_to_string(dirs.path("state/events.jsonl")).unwrap(),
        ""
    );
    third.child.kill().unwrap();
    third.child.wait().unwrap();
    dirs.kill_strays();
    drop(third);
    let fourth = Agent::start(&dirs, &[]);
    let after = fourth.events_until(end, |e| !e.is_empty()).await;
    assert_eq!(after[0].seq, end + 1);
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[tokio::test]
async fn event_streams_end_when_the_client_goes_away() {
    let dirs = BoxDirs::new();
    dirs.harness(json!({}), json!({}));
    let agent = Agent::start(&dirs, &[]);
    agent
        .events_until(0, |e| kinds(e).contains(&"system"))
        .await;
    let baseline = open_fds(agent.pid());
    let mut streams = Vec::new();
    for _ in 0..20 {
        streams.push(agent.client.events(0).await.unwrap());
    }
    let opened = open_fds(agent.pid());
    // (The stream read above may still be closing when the baseline is taken.)
    assert!(
        opened >= baseline + 19,
        "{opened} fds open, {baseline} before"
    );
    drop(streams);
    let deadline = Instant::now() + Duration::from_secs(5);
    while open_fds(agent.pid()) > baseline {
        assert!(
            Instant::now() < deadline,
            "{} fds left open, {baseline} before",
            open_fds(agent.pid())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn write_acks_complete_once_the_line_is_in_the_pipe() {
    let dirs = BoxDirs::new();
    let config = json!({"command": ["/bin/cat"], "ack": "write"});
    std::fs::write(dirs.path("run/harness.json"), config.to_string()).unwrap();
    let agent = Agent::start(&dirs, &[]);
    assert!(!agent.deliver("msg_1", "one").await.unwrap());
    assert!(agent.deliver("msg_1", "one").await.unwrap());
    // `cat` prints the line back: an ordinary `user` event.
    let events = agent.events_until(0, |e| kinds(e).contains(&"user")).await;
    assert_eq!(kinds(&events), ["harness_start", "user"]);
    assert_eq!(events[1].data["message"]["content"], "one");
}
