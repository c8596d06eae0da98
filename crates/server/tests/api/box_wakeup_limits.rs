//! An agent cannot wake itself without limit (issue 20, part 4). A prompt-injected agent
//! ran `berth-wake cron "* * * * *"` 32 times: the per-hour limit counted wakeups made, so
//! every slot of all 32 fired, about 1,900 turns an hour. Here a real sandbox box does the
//! same through `berth-wake` (the relay path), and the daemon's wakeup clock is driven
//! through a simulated hour, a minute at a time: the box's slots fired in that hour are at
//! most `[wakeups] box_max_per_hour`, the crons past `[wakeups] box_max_crons` are refused
//! naming the key, and the skipped slots are counted in the wakeup list, told once in the
//! box's log, and shown by `berth-wake ls`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_server::lifecycle::wakeups::clock::WakeupClock;
use berth_server::lifecycle::wakeups::config::WakeupsHostConfig;
use serde_json::Value;

use crate::end_to_end::exec;
use crate::harness::TestServer;
use crate::messages::wait_events;
use crate::wakeups::{create_echo, now_ms, pending, sandbox, start_with_limits};

const MINUTE_MS: i64 = 60_000;

/// Time that moves only when the test moves it.
#[derive(Debug)]
struct SimulatedClock(AtomicI64);

impl WakeupClock for SimulatedClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// Waits until the scheduler has fired (or skipped) every slot due at `now_ms`.
async fn wait_caught_up(server: &TestServer, now_ms: i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        match server.store.next_wakeup_due_ms().unwrap() {
            Some(due) if due <= now_ms => {}
            _ => return,
        }
        assert!(
            Instant::now() < deadline,
            "the scheduler has not caught up with {now_ms}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn sum(wakeups: &[Value], field: &str) -> u64 {
    wakeups.iter().map(|w| w[field].as_u64().unwrap_or(0)).sum()
}

#[tokio::test]
async fn thirty_two_crons_from_inside_a_box_fire_at_most_the_hourly_limit() {
    let Some((data, runtime)) = sandbox() else {
        return;
    };
    let limits = WakeupsHostConfig::default();
    let mut server = start_with_limits(data, runtime, limits.clone()).await;
    let start_ms = now_ms();
    let clock = Arc::new(SimulatedClock(AtomicI64::new(start_ms)));
    assert!(server.wakeups.drive_clock(clock.clone()));
    create_echo(&server, "agent").await;

    let flood = exec(
        &server,
        "agent",
        &[
            "sh",
            "-c",
            "for i in $(seq 1 32); do berth-wake cron '* * * * *' \"tick $i\" 2>&1; done",
        ],
    )
    .await;
    let said = flood["stdout"].as_str().unwrap();
    let made = said.lines().filter(|l| l.starts_with("wk_")).count();
    let refused: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("berth-wake: "))
        .collect();
    eprintln!("crons made from inside: {made}, refused: {}", refused.len());

    // A simulated hour, a minute at a time.
    for minute in 1..=60 {
        let now = start_ms + minute * MINUTE_MS;
        clock.0.store(now, Ordering::SeqCst);
        server.wakeups.changed();
        wait_caught_up(&server, now).await;
    }
    let wakeups = pending(&server, "agent").await;
    let fired = sum(&wakeups, "fired");
    let skipped = sum(&wakeups, "skipped");
    eprintln!(
        "in a simulated hour: {fired} slots fired, {skipped} skipped (limit {})",
        limits.box_max_per_hour
    );
    assert!(
        fired <= limits.box_max_per_hour,
        "{fired} slots of the box's own crons fired in an hour, over `box_max_per_hour` ({})",
        limits.box_max_per_hour
    );

    // Four crons were made; each further one was refused naming the key that bounds it.
    assert_eq!(made as u64, limits.box_max_crons, "{said}");
    assert_eq!(refused.len(), 32 - made, "{said}");
    assert!(
        refused
            .iter()
            .all(|r| r.contains("`[wakeups] box_max_crons`")),
        "{said}"
    );
    // The limit binds, it does not starve: every slot fired until the hour was full, and
    // the rest were skipped, not queued (nothing else is due).
    assert_eq!(fired, limits.box_max_per_hour);
    let slots = wakeups
        .iter()
        .map(|w| w["fired"].as_u64().unwrap() + w["skipped"].as_u64().unwrap())
        .collect::<Vec<_>>();
    assert!(
        slots.iter().all(|n| (58..=60).contains(n)),
        "each cron reached every minute's slot of the hour: {slots:?}"
    );
    assert_eq!(skipped, slots.iter().sum::<u64>() - fired);
    // Only the fired slots posted a message.
    let (_, messages) = server
        .call(
            http::Method::GET,
            "/v1/boxes/agent/messages?limit=1000",
            None,
        )
        .await;
    let posted = messages["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["id"].as_str().unwrap().starts_with("wake:"))
        .count();
    assert_eq!(posted as u64, fired, "{messages}");
    assert!(wakeups.iter().all(|w| {
        let next = w["next_due_at"].as_str().unwrap();
        time::OffsetDateTime::parse(next, &time::format_description::well_known::Rfc3339)
            .unwrap()
            .unix_timestamp()
            * 1000
            > start_ms + 60 * MINUTE_MS
    }));
    // The box's log was told once (the hour), and `berth-wake ls` shows the count.
    let events = wait_events(&server, "agent", |e| {
        e.iter()
            .any(|e| e["type"] == "wakeup" && e["data"]["skipped"].is_string())
    })
    .await;
    let told: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "wakeup" && e["data"]["skipped"].is_string())
        .collect();
    assert_eq!(told.len(), 1, "{told:?}");
    let reason = told[0]["data"]["skipped"].as_str().unwrap();
    assert!(reason.contains("`[wakeups] box_max_per_hour`"), "{reason}");
    let listed = exec(&server, "agent", &["berth-wake", "ls"]).await;
    let listed = listed["stdout"].as_str().unwrap();
    assert!(
        listed
            .lines()
            .filter(|l| l.contains("skipped: over box_max_per_hour"))
            .count()
            == made,
        "{listed}"
    );
    server.shut_down().await;
}
