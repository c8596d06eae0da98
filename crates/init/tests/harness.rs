//! The harness, end to end: the real `berth-init` (as root, not PID 1, with temporary
//! `--run-dir`/`--state-dir`/`--home`/`--memory`) runs the real `echo-harness`
//! (`ECHO_HARNESS_BIN`, built by `make init`) and is driven with the host's own client.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use berth_protocol::guest::BOX_USER_UID;
use berth_protocol::harness::{DeliverRequest, GuestEvent, HarnessState, HarnessStatus};
use berth_protocol::ErrorCode;
use berth_runtime::{BootToken, GuestAddr, GuestClient, GuestError};
use serde_json::{json, Value};

fn echo_harness() -> String {
    let bin = env!("ECHO_HARNESS_BIN");
    assert!(
        Path::new(bin).exists(),
        "{bin} is missing: build it with `make init`"
    );
    bin.to_owned()
}

/// The directories of one box; every process still working in them is killed on drop.
struct BoxDirs {
    dir: tempfile::TempDir,
}

impl BoxDirs {
    fn new() -> BoxDirs {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        for sub in ["run", "home", "state"] {
            std::fs::create_dir(dir.path().join(sub)).unwrap();
        }
        let home = dir.path().join("home");
        std::os::unix::fs::chown(&home, Some(BOX_USER_UID), Some(BOX_USER_UID)).unwrap();
        BoxDirs { dir }
    }

    fn path(&self, sub: &str) -> PathBuf {
        self.dir.path().join(sub)
    }

    /// Writes `harness.json`: the echo harness with `env` and `extra` config keys.
    fn harness(&self, env: Value, extra: Value) {
        let mut env = env;
        env["ECHO_HARNESS_MEMORY"] = json!(self.path("memory"));
        // The box user runs it: a copy inside these (world-traversable) dirs, since the
        // build tree may sit under a directory only root can enter (e.g. /root).
        let bin = self.path("bin/echo-harness");
        if !bin.exists() {
            std::fs::create_dir_all(self.path("bin")).unwrap();
            std::fs::copy(echo_harness(), &bin).unwrap();
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let mut config = json!({
            "command": [bin],
            "resume_args": ["--resume", "{session}"],
            "env": env,
        });
        for (k, v) in extra.as_object().unwrap() {
            config[k] = v.clone();
        }
        std::fs::write(self.path("run/harness.json"), config.to_string()).unwrap();
    }

    /// Kills every process whose working directory is inside these dirs (a harness left
    /// behind by a SIGKILLed berth-init).
    fn kill_strays(&self) {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if std::fs::read_link(entry.path().join("cwd"))
                .is_ok_and(|cwd| cwd.starts_with(self.dir.path()))
            {
                // SAFETY: plain kill(2) on a pid we found working in our temp dir.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }

    fn transcript_user_lines(&self) -> Vec<String> {
        let dir = self.path("home/.echo-harness");
        let mut lines = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                if v["role"] == "user" {
                    lines.push(v["text"].as_str().unwrap().to_owned());
                }
            }
        }
        lines
    }
}

impl Drop for BoxDirs {
    fn drop(&mut self) {
        self.kill_strays();
    }
}

/// One running berth-init; stopped (SIGTERM, then SIGKILL) on drop.
struct Agent {
    child: Child,
    client: GuestClient,
}

impl Drop for Agent {
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return; // already reaped: its pid may belong to someone else now
        }
        // SAFETY: signalling our own child, which has not been reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    fn start(dirs: &BoxDirs, extra_args: &[&str]) -> Agent {
        let mut random = [0u8; 32];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut random)
            .unwrap();
        let token = BootToken::from_random(random);
        let run = dirs.path("run");
        std::fs::write(run.join("token"), token.as_str()).unwrap();
        let socket = run.join("agent.sock");
        let _ = std::fs::remove_file(&socket);
        let child = Command::new(env!("CARGO_BIN_EXE_berth-init"))
            .arg("--run-dir")
            .arg(&run)
            .arg("--home")
            .arg(dirs.path("home"))
            .arg("--memory")
            .arg(dirs.path("memory"))
            .arg("--state-dir")
            .arg(dirs.path("state"))
            // Not the box's ports: tests run side by side on the host's loopback.
            .args([
                "--egress-tls",
                "127.0.0.1:0",
                "--egress-proxy",
                "127.0.0.1:0",
            ])
            .args(extra_args)
            .spawn()
            .unwrap();
        let mut agent = Agent {
            child,
            client: GuestClient::new(GuestAddr::Unix(socket.clone()), token),
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            assert!(
                agent.child.try_wait().unwrap().is_none(),
                "berth-init exited"
            );
            assert!(
                Instant::now() < deadline,
                "berth-init did not listen in time"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        agent
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn wait_status(&self, what: &str, ok: impl Fn(&HarnessStatus) -> bool) -> HarnessStatus {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let status = self.client.harness_status().await.unwrap();
            if ok(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "waiting for {what}: {status:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn deliver(&self, id: &str, content: &str) -> Result<bool, GuestError> {
        let req = DeliverRequest {
            id: id.into(),
            content: content.into(),
        };
        self.client.deliver(&req).await.map(|r| {
            assert_eq!(r.id, id);
            r.duplicate
        })
    }

    /// Events with `seq > after` until `done` holds for the events read so far.
    async fn events_until(
        &self,
        after: u64,
        done: impl Fn(&[GuestEvent]) -> bool,
    ) -> Vec<GuestEvent> {
        let mut stream = self.client.events(after).await.unwrap();
        let mut events = Vec::new();
        let read = async {
            while !done(&events) {
                let event = stream.next_frame().await.unwrap().expect("stream ended");
                events.push(event);
            }
        };
        if tokio::time::timeout(Duration::from_secs(15), read)
            .await
            .is_err()
        {
            panic!("timed out; events so far: {events:#?}");
        }
        events
    }
}

fn results(events: &[GuestEvent]) -> usize {
    events.iter().filter(|e| e.kind == "result").count()
}

fn kinds(events: &[GuestEvent]) -> Vec<&str> {
    events.iter().map(|e| e.kind.as_str()).collect()
}

fn remote(err: GuestError) -> (u16, ErrorCode) {
    match err {
        GuestError::Remote { status, body } => (status, body.error.code),
        other => panic!("expected an error answer, got {other:?}"),
    }
}

fn assert_contiguous(events: &[GuestEvent]) {
    for pair in events.windows(2) {
        assert_eq!(pair[1].seq, pair[0].seq + 1, "a gap: {pair:#?}");
    }
}

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
        ["mount", "seal", "volume", "egress", "harness", "serve"]
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
