//! The crash test: 500 messages posted to an echo box while the daemon is SIGKILLed and
//! restarted three times and the box is SIGKILLed once. Every accepted message must reach
//! the harness exactly once and in order (but for the one message a box killed outright can
//! leave in doubt), and the box's event stream must hold every event with no gap in its
//! sequence numbers.
//!
//! Real parts: the `berth` binary as a child process (`berth up`), runc, the static
//! berth-init and the echo harness. Needs root; skipped (and says so) otherwise.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
#[path = "crash/rig.rs"]
mod rig;

use rig::*;
const MESSAGES: usize = 500;
/// Accepted-message counts at which the chaos thread strikes.
const DAEMON_KILLS_AT: [usize; 3] = [80, 260, 420];
const BOX_KILL_AT: usize = 170;
/// The whole test must stay well under 3 minutes on a 2-core machine.
const POSTING_DEADLINE: Duration = Duration::from_secs(90);
const DELIVERY_DEADLINE: Duration = Duration::from_secs(60);

fn content(i: usize) -> String {
    format!("crash-msg-{i:04}")
}

/// Posts message `i` until the daemon answers 202 (retrying with the same idempotency
/// key across connection errors and restarts); returns the message id.
fn post(rig: &Rig, i: usize, deadline: Instant) -> String {
    let body = json!({"content": content(i), "id": format!("crash-{i:04}")});
    let mut last = String::new();
    while Instant::now() < deadline {
        match rig.call("POST", "/v1/boxes/crash/messages", Some(&body)) {
            Ok((200 | 202, answer)) => {
                return answer["id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("no id in {answer}"))
                    .to_string()
            }
            // The daemon is restarting or the box is waking: the message may or may not be
            // stored; the same key makes the retry safe.
            Ok((status @ (500 | 502 | 503 | 504), answer)) => last = format!("{status} {answer}"),
            Ok((status, answer)) => {
                panic!("message {i} refused: {status} {answer}\n{}", rig.log_tail())
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "message {i} not accepted in time (last: {last})\n{}",
        rig.log_tail()
    );
}

/// Every stored event, page by page (`wait=false`).
fn all_events(rig: &Rig) -> Vec<Value> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = rig.call_ok(
            "GET",
            &format!("/v1/boxes/crash/events?after={after}&wait=false"),
            None,
        );
        let batch = page["events"].as_array().cloned().unwrap_or_default();
        let next = page["next_after"].as_u64().unwrap_or(after);
        if batch.is_empty() || next <= after {
            return events;
        }
        events.extend(batch);
        after = next;
    }
}

fn user_replays(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "user")
        .filter_map(|e| e["data"]["message"]["content"].as_str().map(str::to_string))
        .collect()
}

/// Whether the harness's transcript (`users`) holds the `expected` messages in order, each
/// once, but for one message repeated or left out: a repeat's copies are next to each other
/// and it is the first message the harness echoed after one of its starts (`events`).
fn transcript_verdict(
    users: &[String],
    events: &[Value],
    expected: &[String],
) -> Result<(), String> {
    let first_after_a_start = first_replays_after_starts(events);
    let mut seen = std::collections::HashSet::new();
    let mut repeated = None;
    for (i, u) in users.iter().enumerate() {
        if seen.insert(u) {
            continue;
        }
        let in_flight_at_a_kill = users[i - 1] == *u && first_after_a_start.contains(u);
        if !in_flight_at_a_kill || repeated.is_some() {
            return Err(format!("{u} is twice in the transcript"));
        }
        repeated = Some(u);
    }
    let mut order: Vec<usize> = Vec::new();
    for u in users {
        let at = expected
            .iter()
            .position(|e| e == u)
            .ok_or_else(|| format!("{u} is not a message of the test"))?;
        if order.last() != Some(&at) {
            order.push(at);
        }
    }
    if !order.windows(2).all(|w| w[0] < w[1]) {
        return Err("the transcript is out of order".into());
    }
    let missing = expected.len() - seen.len();
    if missing + usize::from(repeated.is_some()) > 1 {
        return Err(format!(
            "the transcript misses {missing} messages and repeats {repeated:?}"
        ));
    }
    Ok(())
}

#[test]
fn the_transcript_verdict_allows_one_message_in_doubt_and_no_more() {
    let texts = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let expected = texts(&["a", "b", "c", "d"]);
    let events = vec![
        json!({"type":"harness_start"}),
        json!({"type":"user","data":{"message":{"content":"a"}}}),
        json!({"type":"user","data":{"message":{"content":"b"}}}),
        json!({"type":"harness_start"}),
        json!({"type":"user","data":{"message":{"content":"c"}}}),
        json!({"type":"user","data":{"message":{"content":"d"}}}),
    ];
    let verdict = |users: &[&str]| transcript_verdict(&texts(users), &events, &expected);
    assert_eq!(verdict(&["a", "b", "c", "d"]), Ok(()));
    // The box died after the harness wrote c, before berth-init journalled its echo.
    assert_eq!(verdict(&["a", "b", "c", "c", "d"]), Ok(()));
    // The box died after berth-init journalled b's echo, before the harness wrote it.
    assert_eq!(verdict(&["a", "c", "d"]), Ok(()));
    assert!(
        verdict(&["a", "b", "c", "d", "d"]).is_err(),
        "d was not in flight at a start"
    );
    assert!(
        verdict(&["a", "c", "b", "c", "d"]).is_err(),
        "not next to each other"
    );
    assert!(
        verdict(&["a", "c", "c", "d"]).is_err(),
        "a repeat and a gap"
    );
    assert!(
        verdict(&["a", "a", "b", "c", "c", "d"]).is_err(),
        "two repeats"
    );
    assert!(verdict(&["b", "a", "c", "d"]).is_err(), "out of order");
    assert!(verdict(&["a", "b"]).is_err(), "two missing");
}

/// The text of the first message the harness echoed after each of its starts.
fn first_replays_after_starts(events: &[Value]) -> Vec<String> {
    let mut firsts = Vec::new();
    let mut started = false;
    for e in events {
        if e["type"] == "harness_start" {
            started = true;
        } else if started && e["type"] == "user" {
            if let Some(text) = e["data"]["message"]["content"].as_str() {
                firsts.push(text.to_string());
            }
            started = false;
        }
    }
    firsts
}

/// The user messages in the echo harness's transcripts on the box's volume, in order. The
/// volume is an ext4 image: the box is stopped (its page cache written back) and the
/// transcripts copied out with debugfs (the next call wakes the box again).
fn transcript(rig: &Rig, box_id: &str) -> (usize, Vec<String>) {
    rig.call_ok("POST", "/v1/boxes/crash/stop", None);
    let image = rig.dir().join("boxes").join(box_id).join("volume.ext4");
    let out = tempfile::tempdir().unwrap();
    let dumped = Command::new("debugfs")
        .arg("-R")
        .arg(format!(
            "rdump /home/.echo-harness {}",
            out.path().display()
        ))
        .arg(&image)
        .output()
        .expect("debugfs (e2fsprogs)");
    assert!(dumped.status.success(), "debugfs: {dumped:?}");
    let dir = out.path().join(".echo-harness");
    let files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} ({dumped:?})", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    let mut users = Vec::new();
    for file in &files {
        for line in fs::read_to_string(file).unwrap().lines() {
            let Ok(entry) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if entry["role"] == "user" {
                users.push(entry["text"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    (files.len(), users)
}

/// For a failure message: how often each text is in the transcript, and the events around
/// each of its replays.
fn where_is(rig: &Rig, box_id: &str, events: &[Value], texts: &[&str]) -> String {
    let (_, users) = transcript(rig, box_id);
    let mut report = String::new();
    for text in texts {
        let in_transcript = users.iter().filter(|u| u == text).count();
        report.push_str(&format!("{text}: {in_transcript}× in the transcript\n"));
        for (i, e) in events.iter().enumerate() {
            if e["type"] == "user" && e["data"]["message"]["content"] == *text {
                for near in &events[i.saturating_sub(6)..(i + 4).min(events.len())] {
                    let data = near["data"].to_string();
                    let data: String = data.chars().take(160).collect();
                    report.push_str(&format!("  {} {} {data}\n", near["seq"], near["type"]));
                }
                report.push_str("  --\n");
            }
        }
    }
    report
}

#[test]
fn messages_survive_daemon_and_box_kills() {
    if let Some(reason) = skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let started = Instant::now();
    let rig = Arc::new(Rig::new());
    rig.start_daemon();
    let created = rig.call_ok(
        "POST",
        "/v1/boxes",
        Some(&json!({"name": "crash", "template": "echo"})),
    );
    let box_id = created["id"].as_str().unwrap().to_string();

    let accepted = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let handle = {
        let (rig, accepted, done, box_id) =
            (rig.clone(), accepted.clone(), done.clone(), box_id.clone());
        std::thread::spawn(move || -> Vec<String> {
            let mut log = Vec::new();
            let mut plan: Vec<(usize, &str)> = DAEMON_KILLS_AT
                .iter()
                .map(|&n| (n, "daemon"))
                .chain([(BOX_KILL_AT, "box")])
                .collect();
            plan.sort();
            for (at, what) in plan {
                while accepted.load(Ordering::SeqCst) < at {
                    if done.load(Ordering::SeqCst) {
                        return log;
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                // How far delivery had got: the kills should land while it is under way.
                let delivered = rig
                    .call("GET", "/v1/boxes/crash/messages?after=0&limit=1000", None)
                    .ok()
                    .and_then(|(_, v)| v["messages"].as_array().cloned())
                    .map(|m| m.iter().filter(|m| m["state"] == "delivered").count());
                match what {
                    "daemon" => {
                        rig.kill_daemon();
                        log.push(format!(
                            "daemon SIGKILLed at {at} accepted, {delivered:?} delivered"
                        ));
                        rig.start_daemon();
                    }
                    _ => {
                        // The box may be between starts; wait for its berth-init.
                        let deadline = Instant::now() + Duration::from_secs(20);
                        let pid = loop {
                            if let Some(pid) = rig.box_pid(&box_id) {
                                break pid;
                            }
                            assert!(Instant::now() < deadline, "the box never ran");
                            std::thread::sleep(Duration::from_millis(10));
                        };
                        // SAFETY: kill(2) on the pid runc reports for the box's init.
                        let rc = unsafe { libc::kill(pid, libc::SIGKILL) };
                        assert_eq!(rc, 0, "kill -9 {pid}");
                        log.push(format!(
                            "box (berth-init pid {pid}) SIGKILLed at {at} accepted, \
                             {delivered:?} delivered"
                        ));
                    }
                }
            }
            log
        })
    };
    // Stops and joins the chaos thread even when this test panics, so the rig's Drop runs.
    let mut chaos = Chaos {
        done: done.clone(),
        handle: Some(handle),
    };

    let post_deadline = Instant::now() + POSTING_DEADLINE;
    let mut ids = Vec::with_capacity(MESSAGES);
    for i in 0..MESSAGES {
        ids.push(post(&rig, i, post_deadline));
        accepted.store(i + 1, Ordering::SeqCst);
    }
    let chaos_log = chaos.stop().expect("the chaos thread panicked");
    eprintln!(
        "posted {MESSAGES} in {:?}; {chaos_log:?}",
        started.elapsed()
    );
    assert_eq!(chaos_log.len(), 4, "not every kill happened: {chaos_log:?}");
    let unique: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(unique.len(), MESSAGES, "two posts got the same message id");

    // Wait until the daemon says every message is delivered and their replays are stored.
    let deadline = Instant::now() + DELIVERY_DEADLINE;
    let (events, messages) = loop {
        let listed = rig.call_ok("GET", "/v1/boxes/crash/messages?after=0&limit=1000", None);
        let messages = listed["messages"].as_array().cloned().unwrap_or_default();
        let delivered = messages
            .iter()
            .filter(|m| m["state"] == "delivered")
            .count();
        let events = all_events(&rig);
        let replays = user_replays(&events).len();
        if delivered >= MESSAGES && replays >= MESSAGES {
            break (events, messages);
        }
        assert!(
            Instant::now() < deadline,
            "after {DELIVERY_DEADLINE:?}: {delivered}/{MESSAGES} delivered, {replays} replays\n{}",
            rig.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    // The store: exactly our 500 messages, in posting order.
    assert_eq!(messages.len(), MESSAGES, "stored messages");
    let stored: Vec<&str> = messages
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (0..MESSAGES).map(content).collect();
    assert_eq!(stored, expected, "stored messages out of order");
    let stored_ids: Vec<&str> = messages.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(stored_ids, ids, "the ids answered are not the ids stored");

    // The events: seq 1..N with no gap, and one replay per message, in order.
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    let want: Vec<u64> = (1..=seqs.len() as u64).collect();
    if seqs != want {
        let gap = seqs.windows(2).find(|w| w[1] != w[0] + 1);
        panic!("event seqs are not 1..{}: first break {gap:?}", seqs.len());
    }
    let replays = user_replays(&events);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for r in &replays {
        *counts.entry(r.as_str()).or_default() += 1;
    }
    let repeated: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    if !repeated.is_empty() {
        let texts: Vec<&str> = repeated.iter().map(|(t, _)| **t).collect();
        panic!(
            "replayed more than once ({chaos_log:?}):\n{}",
            where_is(&rig, &box_id, &events, &texts)
        );
    }
    assert_eq!(
        replays, expected,
        "the harness saw the messages out of order"
    );

    // The harness's own transcript on the volume. berth-init learns that the harness has a
    // message when it journals the harness's echo of it, and the harness may write its
    // transcript first. So a box killed outright between the two gets that one message again
    // when it restarts (only the harness knew it had it), and a box killed after the echo but
    // before the harness wrote leaves that one message out. The box is killed once: at most
    // one message repeated or left out, not both; a repeat's two copies are next to each
    // other, and it is the first message the harness echoed after a start.
    let (files, users) = transcript(&rig, &box_id);
    assert_eq!(files, 1, "the harness did not resume its one session");
    if let Err(why) = transcript_verdict(&users, &events, &expected) {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for u in &users {
            *counts.entry(u.as_str()).or_default() += 1;
        }
        let twice: Vec<&str> = counts
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(u, _)| u)
            .collect();
        panic!(
            "{why} ({chaos_log:?}):\n{}",
            where_is(&rig, &box_id, &events, &twice)
        );
    }

    // `berth send` on a long log (its newest seq is searched for past the first pages)
    // follows exactly its own turn.
    let out = Command::new(BERTH)
        .args(["send", "crash", "remember the end"])
        .env("BERTH_URL", format!("http://{}", rig.listen))
        .env("BERTH_API_KEY", rig.key.lock().unwrap().as_str())
        .env_remove("BERTH_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "berth send: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(answer, "OK, I will remember the end.\n");

    // `berth send` rides out a daemon crash in the middle of its turn: it reconnects and
    // resumes the event stream with Last-Event-ID.
    let mut child = KillOnDrop(Some(
        Command::new(BERTH)
            .args(["send", "crash", "sleep 1500"])
            .env("BERTH_URL", format!("http://{}", rig.listen))
            .env("BERTH_API_KEY", rig.key.lock().unwrap().as_str())
            .env_remove("BERTH_DATA_DIR")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !user_replays(&all_events(&rig))
        .iter()
        .any(|u| u == "sleep 1500")
    {
        assert!(
            Instant::now() < deadline,
            "the harness never got \"sleep 1500\""
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    rig.kill_daemon();
    rig.start_daemon();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.0.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "berth send did not finish after the daemon restart"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.0.take().unwrap().wait_with_output().unwrap();
    assert!(
        status.success(),
        "berth send across a daemon crash: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        rig.log_tail()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "echo: sleep 1500\n");

    let took = started.elapsed();
    eprintln!(
        "crash test: {MESSAGES} messages, {} events, transcript {} messages, {took:?}",
        events.len(),
        users.len()
    );
    assert!(took < Duration::from_secs(180), "took {took:?}");
}
