//! Boot, stop, pause, shutting itself down, and a start that fails.

use std::time::{Duration, Instant};

use berth_protocol::guest::BoxUser;
use berth_protocol::BoxId;
use berth_runtime::{Limits, RuntimeError, RuntimeStatus};

use crate::common::{self, run, run_ok, Fixture};
use crate::GRACE;

/// The box boots, its agent answers, users and PID 1 are what they must be.
pub async fn boots_and_answers_as_user_1001_with_berth_init_as_pid_1(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let t0 = Instant::now();
    let client = fx.runtime.start(&spec).await.expect("start").client;
    eprintln!("start to ready: {:?}", t0.elapsed());
    client.info().await.expect("info");
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Running
    );
    assert_eq!(
        run_ok(&client, &["id", "-u"], BoxUser::User).await.trim(),
        "1001"
    );
    assert_eq!(
        run_ok(&client, &["id", "-u"], BoxUser::Root).await.trim(),
        "0"
    );
    common::assert_berth_init_is_pid_1(&client).await;
    for file in ["/proc/1/environ", "/proc/1/mem"] {
        let (code, _, _) = run(&client, &["head", "-c", "1", file], BoxUser::User, None).await;
        assert_ne!(code, 0, "user could read {file}");
    }
    // Programs need a world-writable, sticky /tmp (runc takes a tmpfs's mode from the
    // directory it covers, not from its options).
    assert_eq!(
        run_ok(
            &client,
            &["sh", "-c", "stat -c %a /tmp && touch /tmp/x && echo ok"],
            BoxUser::User
        )
        .await
        .split_whitespace()
        .collect::<Vec<_>>(),
        ["1777", "ok"]
    );
    assert!(fx.runtime.list().await.unwrap().contains(&spec.id));
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Stopped
    );
}

/// After stop nothing of the box is left: its host processes (the sandbox's id range;
/// a VM's QEMU and its channel bridge), runtime state, sockets, cgroups, mounts.
pub async fn stop_leaves_nothing_behind(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    // Something that ignores SIGTERM, in the background.
    let bg = client.clone();
    let _stubborn = tokio::spawn(async move {
        run(
            &bg,
            &["sh", "-c", "trap '' TERM; sleep 1000"],
            BoxUser::User,
            None,
        )
        .await
    });
    common::wait_until_within(fx.patience(), || async {
        run_ok(
            &client,
            &["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"],
            BoxUser::Root,
        )
        .await
        .contains("sleep 1000")
    })
    .await;
    assert!(
        !fx.box_processes(&spec).is_empty(),
        "the probe sees nothing"
    );
    fx.runtime
        .stop(&spec.id, Duration::from_millis(500))
        .await
        .expect("stop");
    assert_no_processes(fx, &spec);
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Stopped
    );
    assert!(!fx.runtime.list().await.unwrap().contains(&spec.id));
    assert_eq!(fx.traces_left(&spec.id), Vec::<String>::new());
    // Stopping again, and stopping an unknown box, are fine.
    fx.runtime.stop(&spec.id, GRACE).await.expect("second stop");
    fx.runtime
        .stop(&BoxId::from_random(common::random()), GRACE)
        .await
        .expect("unknown stop");
    fx.runtime.remove(&spec.id).await.expect("remove");
    assert!(!fx.box_dir(&spec.id).exists());
}

fn assert_no_processes(fx: &Fixture, spec: &berth_runtime::BoxSpec) {
    let left = fx.box_processes(spec);
    let detail: Vec<String> = left
        .iter()
        .map(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .unwrap_or_default()
                .lines()
                .take(8)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect();
    assert!(left.is_empty(), "processes of the box left: {detail:?}");
}

/// A shell that counts in a variable (memory only) and writes `PID COUNT` every 50 ms.
/// A paused box answers nothing until resumed, and its processes go on where they were.
pub async fn pause_freezes_until_resume(fx: &Fixture) {
    if !fx.runtime.capabilities().pause {
        berth_testkit::skip(fx.backend().part(), "this backend cannot pause");
        return;
    }
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    assert!(matches!(
        fx.runtime.resume(&spec.id).await,
        Err(RuntimeError::WrongState { .. })
    ));
    fx.runtime.pause(&spec.id).await.expect("pause");
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Paused
    );
    assert!(matches!(
        fx.runtime.pause(&spec.id).await,
        Err(RuntimeError::WrongState { .. })
    ));
    let frozen = tokio::time::timeout(
        Duration::from_millis(1500),
        run(&client, &["echo", "ok"], BoxUser::User, None),
    )
    .await;
    assert!(frozen.is_err(), "a paused box answered");
    fx.runtime.resume(&spec.id).await.expect("resume");
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Running
    );
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    // A process keeps what it held only in memory across a pause: the same process counts
    // on from where it was (a new one would start again from 1).
    common::start_counter(&client).await;
    let before = common::counted_past(&client, 2).await;
    fx.runtime.pause(&spec.id).await.expect("pause again");
    fx.runtime.resume(&spec.id).await.expect("resume again");
    let after = common::counted_past(&client, before.1).await;
    assert_eq!(after.0, before.0, "the same process after the pause");
    // Stopping a paused box works too.
    fx.runtime.pause(&spec.id).await.unwrap();
    fx.runtime
        .stop(&spec.id, GRACE)
        .await
        .expect("stop a paused box");
    assert_no_processes(fx, &spec);
    assert!(fx.runtime.list().await.unwrap().is_empty());
}

/// A box whose berth-init exits on its own (shutdown; in a VM the guest powers off) reads
/// as stopped and starts again.
pub async fn box_that_shut_itself_down_is_stopped_and_restarts(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    client.shutdown().await.expect("shutdown");
    common::wait_until_within(fx.patience(), || async {
        fx.runtime.status(&spec.id).await.unwrap() == RuntimeStatus::Stopped
    })
    .await;
    assert!(!fx.runtime.list().await.unwrap().contains(&spec.id));
    assert_no_processes(fx, &spec);
    let again = common::next_boot(&spec);
    let client = fx
        .runtime
        .start(&again)
        .await
        .expect("start after shutdown")
        .client;
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    // Starting a running box is a state error, not a second box.
    assert!(matches!(
        fx.runtime.start(&again).await,
        Err(RuntimeError::WrongState { .. })
    ));
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// Starting must not leave anything behind when berth-init cannot come up.
pub async fn failed_start_leaves_nothing_running(fx: &Fixture) {
    let mut spec = fx.spec(Limits::default());
    spec.hostname = "x".repeat(100); // longer than a UTS name may be
    let t0 = Instant::now();
    let err = fx
        .runtime
        .start(&spec)
        .await
        .expect_err("a 100-char hostname must fail");
    eprintln!(
        "expected failure after {:?}: {}",
        t0.elapsed(),
        berth_runtime::error_chain(&err)
    );
    assert!(fx.runtime.list().await.unwrap().is_empty());
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Stopped
    );
    assert_no_processes(fx, &spec);
    assert_eq!(fx.traces_left(&spec.id), Vec::<String>::new());
}
