//! Scheduled wakeups on real boxes (the sandbox runtime, berth-init, the echo harness):
//! `in_s` and `at` fire once each; a daemon killed while a slot comes due fires it at its
//! next start, marked late, once even when the kill came between posting the slot's
//! message and recording the slot; a cron slot missed while the daemon was down fires once
//! and the cron goes on; `berth-wake` inside the box schedules a wakeup that wakes the
//! stopped box, and a flood from inside is refused naming the limit.

use std::sync::Arc;
use std::time::Duration;

use berth_runtime::Runtime;

use berth_protocol::BoxId;
use berth_server::lifecycle::wakeups::config::WakeupsHostConfig;
use berth_server::HostConfig;
use berth_store::{AddedWakeup, NewWakeup, Store, WakeupKind, WakeupLimits, WakeupOrigin};
use http::{Method, StatusCode};
use serde_json::{json, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::end_to_end::exec;
use crate::harness::{error_code, TestServer};
use crate::idle::wait_state;
use crate::messages::wait_events;
use crate::talk::{kill, start_killable, Containers};
use crate::turns::answers;

pub(crate) fn now_ms() -> i64 {
    (OffsetDateTime::now_utc().unix_timestamp_nanos() / 1_000_000) as i64
}

fn wakeup_events(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["type"] == "wakeup")
        .map(|e| e["data"].clone())
        .collect()
}

pub(crate) async fn create_echo(server: &TestServer, name: &str) {
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": name, "template": "echo"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

async fn set(server: &TestServer, name: &str, body: Value) -> (StatusCode, Value) {
    server
        .call(
            Method::POST,
            &format!("/v1/boxes/{name}/wakeups"),
            Some(body),
        )
        .await
}

pub(crate) async fn pending(server: &TestServer, name: &str) -> Vec<Value> {
    let (status, body) = server
        .call(Method::GET, &format!("/v1/boxes/{name}/wakeups"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["wakeups"].as_array().unwrap().clone()
}

/// How many of the box's messages carry `id`.
async fn messages_with_id(server: &TestServer, name: &str, id: &str) -> usize {
    let (status, body) = server
        .call(Method::GET, &format!("/v1/boxes/{name}/messages"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["id"] == id)
        .count()
}

/// A data dir and the sandbox runtime on it; `None` (skipped, and said) where the host
/// cannot run it.
pub(crate) fn sandbox() -> Option<(tempfile::TempDir, Arc<dyn Runtime>)> {
    let data = tempfile::tempdir().unwrap();
    match crate::end_to_end::sandbox(data.path()) {
        Ok(runtime) => Some((data, runtime)),
        Err(reason) => {
            berth_testkit::skip("sandbox", &reason);
            None
        }
    }
}

/// A daemon on the sandbox runtime with these `[wakeups]` limits.
pub(crate) async fn start_with_limits(
    data: tempfile::TempDir,
    runtime: Arc<dyn Runtime>,
    wakeups: WakeupsHostConfig,
) -> TestServer {
    let host = HostConfig {
        wakeups,
        ..Default::default()
    };
    TestServer::start_with_host(
        berth_server::Runtimes::single(runtime),
        Some("runc".into()),
        data,
        host,
    )
    .await
}

fn count(list: &[String], wanted: &str) -> usize {
    list.iter().filter(|a| a.as_str() == wanted).count()
}

#[tokio::test]
async fn wakeups_fire_once_per_slot_across_a_daemon_kill() {
    let Some((data, runtime)) = sandbox() else {
        return;
    };
    let _cleanup = Containers(data.path().to_owned());
    let (daemon_runtime, first) = start_killable(runtime, data);
    create_echo(&first, "w").await;

    // Bad requests answer clearly.
    for (bad, needle) in [
        (json!({"message": "m"}), "exactly one of"),
        (
            json!({"in_s": 1, "cron": "* * * * *", "message": "m"}),
            "exactly one of",
        ),
        (json!({"at": "tomorrow", "message": "m"}), "RFC 3339"),
        (
            json!({"at": "2020-01-01T00:00:00Z", "message": "m"}),
            "in the past",
        ),
        (json!({"cron": "* * * * * *", "message": "m"}), "5 fields"),
        (
            json!({"cron": "0 9 * * *", "tz": "Mars/Olympus", "message": "m"}),
            "time zone",
        ),
        (
            json!({"in_s": 1, "tz": "UTC", "message": "m"}),
            "`tz` goes with `cron`",
        ),
        (json!({"in_s": 1, "message": ""}), "must not be empty"),
    ] {
        let (status, body) = set(&first, "w", bad.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert_eq!(error_code(&body), "invalid_request");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{bad}: {message}");
    }
    let (status, body) = set(&first, "nobody", json!({"in_s": 1, "message": "m"})).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = first
        .call(
            Method::DELETE,
            "/v1/boxes/w/wakeups/wk_0000000000000000",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // At most `max_pending_per_box` (32) pending: one more is a conflict naming the key.
    let mut ids = Vec::new();
    for i in 0..32 {
        let (status, made) = set(
            &first,
            "w",
            json!({"in_s": 3600, "message": format!("later {i}")}),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        ids.push(made["id"].as_str().unwrap().to_owned());
    }
    let (status, body) = set(&first, "w", json!({"in_s": 3600, "message": "one more"})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`[wakeups] max_pending_per_box`"),
        "{body}"
    );
    for id in &ids {
        let (status, body) = first
            .call(Method::DELETE, &format!("/v1/boxes/w/wakeups/{id}"), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    // `in_s` and `at`: each fires once; a cancelled one never.
    let (status, one) = set(&first, "w", json!({"in_s": 1, "message": "ping one"})).await;
    assert_eq!(status, StatusCode::CREATED, "{one}");
    assert_eq!(
        (one["kind"].as_str(), one["created_by"].as_str()),
        (Some("in"), Some("api"))
    );
    let at = OffsetDateTime::now_utc() + time::Duration::seconds(2);
    let (status, two) = set(
        &first,
        "w",
        json!({"at": at.format(&Rfc3339).unwrap(), "message": "ping two"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{two}");
    let (_, never) = set(&first, "w", json!({"in_s": 2, "message": "never"})).await;
    let (status, gone) = first
        .call(
            Method::DELETE,
            &format!("/v1/boxes/w/wakeups/{}", never["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{gone}");
    let events = wait_events(&first, "w", |e| {
        let a = answers(e);
        count(&a, "echo: ping one") == 1 && count(&a, "echo: ping two") == 1
    })
    .await;
    let fired = wakeup_events(&events);
    assert_eq!(fired.len(), 2, "{fired:?}");
    assert_eq!(fired[0]["wakeup_id"], one["id"]);
    assert_eq!(fired[1]["wakeup_id"], two["id"]);
    assert_eq!(fired[1]["kind"], "at");
    assert!(pending(&first, "w").await.is_empty());
    eprintln!(
        "fired after their slots by (ms): {:?}",
        fired.iter().map(|f| &f["late_ms"]).collect::<Vec<_>>()
    );

    // A slot comes due while the daemon is dead; the kill came right after the slot's
    // message was posted, before the slot was recorded.
    let (status, three) = set(&first, "w", json!({"in_s": 1, "message": "ping three"})).await;
    assert_eq!(status, StatusCode::CREATED, "{three}");
    let data = kill(daemon_runtime, first).await;
    let store = Store::open(&data.path().join(berth_store::DB_FILE)).unwrap();
    let box_id: BoxId = one["box_id"].as_str().unwrap().parse().unwrap();
    let three_stored = store
        .list_wakeups(&box_id)
        .unwrap()
        .into_iter()
        .find(|w| w.id == three["id"])
        .expect("ping three had not fired when the daemon died");
    let slot = three_stored.next_due_ms;
    let key = three_stored.slot_key(slot);
    assert!(
        store
            .post_message(&box_id, Some(&key), "ping three")
            .unwrap()
            .created
    );
    // A cron whose slot passed while the daemon was down.
    let AddedWakeup::Added(cron) = store
        .add_wakeup(
            NewWakeup {
                box_id: &box_id,
                message: "ping cron",
                kind: WakeupKind::Cron {
                    expr: "* * * * *".into(),
                    tz: "Europe/Paris".into(),
                },
                first_due_ms: now_ms() - 5_000,
                created_by: WakeupOrigin::Api,
            },
            WakeupLimits {
                max_pending: 32,
                max_per_hour: None,
                max_box_crons: None,
            },
        )
        .unwrap()
    else {
        panic!("the cron is added");
    };
    drop(store);
    // The slot is past before the daemon comes back.
    while now_ms() <= slot {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let runtime = crate::end_to_end::sandbox(data.path()).unwrap();
    let mut second = TestServer::start(runtime, Some("runc".into()), data).await;
    let events = wait_events(&second, "w", |e| {
        let a = answers(e);
        count(&a, "echo: ping three") == 1 && count(&a, "echo: ping cron") == 1
    })
    .await;
    let fired = wakeup_events(&events);
    let late: Vec<&Value> = fired
        .iter()
        .filter(|f| f["wakeup_id"] == three["id"])
        .collect();
    assert_eq!(late.len(), 1, "one event for the slot: {fired:?}");
    assert!(late[0]["late_ms"].as_i64().unwrap() > 0, "{late:?}");
    assert_eq!(late[0]["message_id"], key.as_str());
    assert_eq!(messages_with_id(&second, "w", key.as_str()).await, 1);
    let cron_fired: Vec<&Value> = fired.iter().filter(|f| f["wakeup_id"] == cron.id).collect();
    assert_eq!(cron_fired.len(), 1, "{fired:?}");
    assert!(
        cron_fired[0]["late_ms"].as_i64().unwrap() >= 5_000,
        "{cron_fired:?}"
    );
    // The cron goes on at its next minute.
    let left = pending(&second, "w").await;
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        (left[0]["id"].as_str(), left[0]["fired"].as_u64()),
        (Some(cron.id.as_str()), Some(1))
    );
    let next = OffsetDateTime::parse(left[0]["next_due_at"].as_str().unwrap(), &Rfc3339).unwrap();
    assert!(next > OffsetDateTime::now_utc(), "{left:?}");
    assert_eq!(next.second(), 0);
    // Nothing fires twice: the answers hold each message once.
    let a = answers(&events);
    for m in ["ping one", "ping two", "ping three", "ping cron"] {
        assert_eq!(count(&a, &format!("echo: {m}")), 1, "{a:?}");
    }
    assert_eq!(count(&a, "echo: never"), 0);
    second.shut_down().await;
}

#[tokio::test]
async fn berth_wake_inside_the_box_wakes_it_later_and_a_flood_is_refused() {
    let Some((data, runtime)) = sandbox() else {
        return;
    };
    let limits = WakeupsHostConfig {
        box_min_delay_s: 3,
        box_max_per_hour: 4,
        ..Default::default()
    };
    let mut server = start_with_limits(data, runtime, limits).await;
    create_echo(&server, "agent").await;

    let out = exec(&server, "agent", &["berth-wake", "in", "15s", "wake", "me"]).await;
    assert_eq!(out["exit_code"], 0, "{out}");
    let stdout = out["stdout"].as_str().unwrap();
    assert!(
        stdout.starts_with("wk_") && stdout.contains("set: next at"),
        "{out}"
    );
    let id = stdout.split_whitespace().next().unwrap().to_owned();
    let set = pending(&server, "agent").await;
    assert_eq!(
        (set[0]["id"].as_str(), set[0]["created_by"].as_str()),
        (Some(id.as_str()), Some("box")),
        "{set:?}"
    );

    let timed = exec(
        &server,
        "agent",
        &[
            "sh",
            "-c",
            "a=$(date +%s%N); berth-wake ls >/dev/null; b=$(date +%s%N); echo $(((b - a) / 1000000))",
        ],
    )
    .await;
    eprintln!(
        "berth-wake ls round trip through the daemon: {} ms",
        timed["stdout"].as_str().unwrap().trim()
    );

    // Only the box's user and root may ask: any other uid in the box is refused.
    let (status, other) = server
        .call(
            Method::POST,
            "/v1/boxes/agent/exec",
            Some(json!({"user": "root", "cmd": [
                "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                "berth-wake", "in", "1h", "not mine",
            ]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{other}");
    assert_eq!(other["exit_code"], 1, "{other}");
    assert!(
        other["stderr"]
            .as_str()
            .unwrap()
            .contains("only the box's user may set wakeups"),
        "{other}"
    );

    // Limits: too soon (refused before it counts), then a flood (the hour allows 4, one
    // is used).
    let soon = exec(&server, "agent", &["berth-wake", "in", "1s", "now"]).await;
    assert_eq!(soon["exit_code"], 1, "{soon}");
    assert!(
        soon["stderr"]
            .as_str()
            .unwrap()
            .contains("`[wakeups] box_min_delay_s`"),
        "{soon}"
    );
    let flood = exec(
        &server,
        "agent",
        &[
            "sh",
            "-c",
            "for i in 1 2 3 4 5 6; do berth-wake in 1h \"flood $i\" || exit $i; done",
        ],
    )
    .await;
    assert_eq!(flood["exit_code"], 4, "{flood}");
    let refused = flood["stderr"].as_str().unwrap();
    assert!(
        refused.starts_with("berth-wake: ") && refused.contains("`[wakeups] box_max_per_hour`"),
        "{flood}"
    );
    let listed = exec(&server, "agent", &["berth-wake", "ls"]).await;
    let floods: Vec<&str> = listed["stdout"]
        .as_str()
        .unwrap()
        .lines()
        .filter(|l| l.contains("flood"))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(floods.len(), 3, "{listed}");
    for id in floods {
        let out = exec(&server, "agent", &["berth-wake", "rm", id]).await;
        assert_eq!(out["exit_code"], 0, "{out}");
    }
    assert_eq!(pending(&server, "agent").await.len(), 1);

    // The box sleeps before it comes due; the wakeup wakes it and the harness gets the
    // message.
    let (status, body) = server
        .call(Method::POST, "/v1/boxes/agent/stop", None)
        .await;
    assert!(status.is_success(), "{body}");
    wait_state(&server, "agent", "stopped", Duration::from_secs(60)).await;
    assert_eq!(
        pending(&server, "agent").await.len(),
        1,
        "fired before the stop"
    );
    // Woken by the wakeup (nothing else calls it meanwhile).
    wait_state(&server, "agent", "running", Duration::from_secs(60)).await;
    let events = wait_events(&server, "agent", |e| {
        count(&answers(e), "echo: wake me") == 1
    })
    .await;
    let fired = wakeup_events(&events);
    assert_eq!(fired.len(), 1, "{fired:?}");
    assert_eq!(
        (
            fired[0]["wakeup_id"].as_str(),
            fired[0]["created_by"].as_str()
        ),
        (Some(id.as_str()), Some("box"))
    );
    // The box was stopped when it came due: it started again for the message.
    let starts = events
        .iter()
        .filter(|e| e["type"] == "state" && e["data"]["state"] == "running")
        .count();
    assert!(starts >= 2, "{events:#?}");
    assert!(pending(&server, "agent").await.is_empty());
    server.shut_down().await;
}
