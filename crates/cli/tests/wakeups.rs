//! A wakeup whose slot comes due while the daemon is SIGKILLed fires once when the daemon
//! starts again, its event saying how late; `berth box wakeup add|ls|rm` drive it.
//!
//! Real parts: the `berth` binary as a child process (`berth up`), runc, the static
//! berth-init and the echo harness. Needs root; skipped (and says so) otherwise.

mod common;

use std::time::{Duration, Instant, SystemTime};

use common::{e2e_skip_reason, Daemon};
use serde_json::Value;

/// How far ahead the wakeup is set: time enough to kill the daemon before it.
const DELAY_S: u64 = 8;

/// The box's events, from `berth logs NAME --json`.
fn events(daemon: &Daemon, name: &str) -> Vec<Value> {
    daemon
        .berth_ok(&["logs", name, "--json"])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn answers(events: &[Value], text: &str) -> usize {
    events
        .iter()
        .filter(|e| e["type"] == "assistant")
        .filter(|e| e["data"]["message"]["content"][0]["text"] == text)
        .count()
}

#[test]
fn a_wakeup_due_while_the_daemon_is_killed_fires_once_at_its_next_start() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let mut daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "w", "--template", "echo"]);

    // Set and cancelled: never fires.
    let never: Value = serde_json::from_str(
        &daemon.berth_ok(&["box", "wakeup", "add", "w", "--in", "2s", "--json", "never"]),
    )
    .unwrap();
    let id = never["id"].as_str().unwrap();
    assert_eq!(
        daemon.berth_ok(&["box", "wakeup", "rm", "w", id]),
        format!("cancelled {id}\n")
    );
    let asked = SystemTime::now();
    let set = daemon.berth_ok(&[
        "box",
        "wakeup",
        "add",
        "w",
        "--in",
        &DELAY_S.to_string(),
        "ping after the kill",
    ]);
    assert!(set.starts_with("wk_") && set.contains(" next at "), "{set}");
    let listed = daemon.berth_ok(&["box", "wakeup", "ls", "w"]);
    assert!(listed.starts_with("ID"), "{listed}");
    assert!(listed.contains("ping after the kill"), "{listed}");

    daemon.kill();
    // The slot is no sooner than DELAY_S after the request was sent.
    let due = asked + Duration::from_secs(DELAY_S);
    assert!(
        SystemTime::now() < due,
        "the daemon was killed only after the slot: the test proves nothing"
    );
    // It passes while the daemon is down (by the clock the daemon reads).
    while SystemTime::now() <= due + Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon.restart();

    let deadline = Instant::now() + Duration::from_secs(60);
    let events = loop {
        let events = events(&daemon, "w");
        if answers(&events, "echo: ping after the kill") > 0 {
            break events;
        }
        assert!(
            Instant::now() < deadline,
            "the wakeup never got to the harness: {events:#?}\n{}",
            daemon.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let fired: Vec<&Value> = events.iter().filter(|e| e["type"] == "wakeup").collect();
    assert_eq!(fired.len(), 1, "{fired:#?}");
    assert!(
        fired[0]["data"]["late_ms"].as_u64().unwrap() >= 500,
        "{fired:#?}"
    );
    assert_eq!(answers(&events, "echo: ping after the kill"), 1);
    assert_eq!(answers(&events, "echo: never"), 0);
    assert_eq!(
        daemon
            .berth_ok(&["box", "wakeup", "ls", "w"])
            .lines()
            .count(),
        1,
        "only the header is left"
    );
}

/// In a VM the command is there too (a copy: the initramfs it came from is gone), on the
/// PATH, and its request goes through berth-init to the daemon and back: a box without a
/// harness is told, in the API's words, that it takes no messages.
#[test]
fn berth_wake_runs_in_a_qemu_box() {
    let Some(daemon) = Daemon::start_with_qemu_box("vm1") else {
        return;
    };
    let out = daemon.berth(&["exec", "vm1", "--", "berth-wake", "in", "2h", "hello"]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    let said = common::stderr(&out);
    assert!(
        said.starts_with("berth-wake: ") && said.contains("has no harness to take messages"),
        "{said}"
    );
}
