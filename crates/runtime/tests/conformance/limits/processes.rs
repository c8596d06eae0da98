//! The process limit: a fork bomb is contained, `limits.pids` caps the box's processes, and
//! nothing in the box can lift it.

use std::time::{Duration, Instant};

use berth_protocol::guest::BoxUser;
use berth_protocol::harness::HarnessConfig;
use berth_runtime::Limits;

use crate::common::{self, run, run_ok, Fixture};
use crate::GRACE;

use super::fixtures::{answers_within, pids_cgroup_dir};

/// A fork bomb is contained: its neighbour answers throughout, the host stops the box and
/// boots it again, and the box itself answers again at once. Both backends enforce
/// `limits.pids` outside the box's reach: the sandbox with its container's pids cgroup,
/// a VM with the guest cgroup berth-init puts every box process in (berth-init itself
/// stays outside it, so the bomb cannot starve it of processes).
pub async fn fork_bomb_is_contained(fx: &Fixture) {
    let spec = fx.spec(Limits {
        pids: 64,
        ..Limits::default()
    });
    let neighbour = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let other = fx
        .runtime
        .start(&neighbour)
        .await
        .expect("start neighbour")
        .client;
    let bomb = {
        let client = client.clone();
        tokio::spawn(async move {
            let t0 = Instant::now();
            let _ = tokio::time::timeout(
                Duration::from_secs(60),
                run(
                    &client,
                    &["sh", "-c", "b() { b | b & }; b"],
                    BoxUser::User,
                    Some(Duration::from_secs(5)),
                ),
            )
            .await;
            t0.elapsed()
        })
    };
    // The neighbour keeps answering for as long as the bomb runs (its exec timeout is 5 s).
    let (mut answered, mut slowest) = (0, Duration::ZERO);
    while !bomb.is_finished() {
        let t0 = Instant::now();
        assert!(
            answers_within(&other, fx.patience()).await,
            "the neighbour stopped answering during the bomb"
        );
        answered += 1;
        slowest = slowest.max(t0.elapsed());
    }
    eprintln!("the neighbour answered {answered} times during the bomb, slowest {slowest:?}");
    assert!(
        answered > 0,
        "the bomb ended before the neighbour was asked"
    );
    eprintln!("fork bomb ended after {:?}", bomb.await.unwrap());
    let t1 = Instant::now();
    common::wait_until_within(fx.patience(), || {
        answers_within(&client, Duration::from_secs(5))
    })
    .await;
    eprintln!("the bombed box answered again after {:?}", t1.elapsed());
    let t2 = Instant::now();
    fx.runtime
        .stop(&spec.id, GRACE)
        .await
        .expect("stop after a fork bomb");
    eprintln!("stop after the bomb: {:?}", t2.elapsed());
    assert!(
        fx.box_processes(&spec).is_empty(),
        "the bombed box outlived stop"
    );
    let again = common::next_boot(&spec);
    let client = fx
        .runtime
        .start(&again)
        .await
        .expect("start after a fork bomb")
        .client;
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    fx.runtime.stop(&neighbour.id, GRACE).await.expect("stop");
}

/// `limits.pids` caps the box's processes: the user's 200 background sleeps stop short of
/// 64, the forks past the limit fail (the kernel counts them in `pids.events`), and the
/// box still answers while it is full; once they are killed it can fork again.
pub async fn process_count_is_capped(fx: &Fixture) {
    let spec = fx.spec(Limits {
        pids: 64,
        ..Limits::default()
    });
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let dir = pids_cgroup_dir(&client).await;
    assert_eq!(
        run_ok(&client, &["cat", &format!("{dir}/pids.max")], BoxUser::User)
            .await
            .trim(),
        "64"
    );
    // `echo` and the arithmetic are shell builtins: only the sleeps fork. A fork that
    // fails ends a non-interactive shell with an error.
    let fill = "i=0; while [ $i -lt 200 ]; do sleep 1000 >/dev/null 2>&1 & \
                i=$((i+1)); echo $i; done";
    let (code, out, err) = run(
        &client,
        &["sh", "-c", fill],
        BoxUser::User,
        Some(Duration::from_secs(120)),
    )
    .await;
    let started: u32 = out
        .lines()
        .rev()
        .find_map(|l| l.trim().parse().ok())
        .unwrap_or(0);
    eprintln!("{started} sleeps started before the limit: {}", err.trim());
    assert_ne!(code, 0, "200 processes fit in a box limited to 64");
    assert!(
        (16..64).contains(&started),
        "{started} sleeps started under a limit of 64 ({err})"
    );
    assert!(
        err.to_lowercase().contains("fork"),
        "the shell did not fail to fork: {err}"
    );

    // Full: the box answers (starting a process moves it in; only forking inside is
    // limited), and a new process cannot fork.
    for user in [BoxUser::User, BoxUser::Root] {
        let (code, out, err) = tokio::time::timeout(
            fx.patience(),
            run(
                &client,
                &["echo", "ok"],
                user,
                Some(Duration::from_secs(30)),
            ),
        )
        .await
        .expect("the full box did not answer");
        assert_eq!((code, out.trim()), (0, "ok"), "{user:?}: {err}");
    }
    let (code, _, err) = run(
        &client,
        &["sh", "-c", "sleep 0; echo forked"],
        BoxUser::Root,
        Some(Duration::from_secs(30)),
    )
    .await;
    assert_ne!(code, 0, "box root forked past the limit: {err}");
    let events = run_ok(
        &client,
        &["cat", &format!("{dir}/pids.events")],
        BoxUser::User,
    )
    .await;
    let refused: u64 = events
        .lines()
        .find_map(|l| l.strip_prefix("max "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(refused >= 2, "the kernel refused no fork: {events}");

    // `kill` signals every process of the user but itself; then forks work again.
    let (code, _, err) = run(&client, &["sh", "-c", "kill -9 -1"], BoxUser::User, None).await;
    assert_eq!(code, 0, "kill -9 -1: {err}");
    common::wait_until_within(fx.patience(), || async {
        let (code, out, _) = run(
            &client,
            &["sh", "-c", "sleep 0 && echo forked"],
            BoxUser::User,
            Some(Duration::from_secs(30)),
        )
        .await;
        code == 0 && out.trim() == "forked"
    })
    .await;
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// Neither the box user nor box root lifts the limit or leaves the box's cgroup through
/// `/sys/fs/cgroup`: it is read-only in the box (the sandbox's runtime mounts it so; a VM's
/// berth-init does), and the user cannot mount a cgroup of its own. The box's processes
/// are in the box cgroup, which is not the root of what the box sees (berth-init is
/// outside it, in the sandbox with a reserve of its own). (Root of a VM may still mount a cgroup2
/// elsewhere: the guest kernel is its own, docs/security.md says so.)
pub async fn box_processes_cannot_lift_their_pids_limit(fx: &Fixture) {
    let mut spec = fx.spec(Limits {
        pids: 64,
        ..Limits::default()
    });
    // A harness too: it must be inside the limit like every exec.
    let harness: HarnessConfig =
        serde_json::from_value(serde_json::json!({"command": ["/bin/cat"], "ack": "write"}))
            .unwrap();
    spec.harness = Some(harness);
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let dir = pids_cgroup_dir(&client).await;
    for user in [BoxUser::User, BoxUser::Root] {
        for (what, script) in [
            ("raise pids.max", format!("echo max > {dir}/pids.max")),
            ("raise pids.max", format!("echo 100000 > {dir}/pids.max")),
            (
                "move itself to the root cgroup",
                "echo $$ > /sys/fs/cgroup/cgroup.procs".to_owned(),
            ),
            (
                "move itself out of the box cgroup",
                format!("echo $$ > {dir}/../cgroup.procs"),
            ),
            (
                "move itself beside berth-init",
                "echo $$ > /sys/fs/cgroup/init/cgroup.procs".to_owned(),
            ),
            (
                "raise the box's memory limit",
                "for f in /sys/fs/cgroup/box/memory.max \
                 /sys/fs/cgroup/memory/box/memory.limit_in_bytes; do \
                 echo 1000000000000 > $f && exit 0; done; exit 1"
                    .to_owned(),
            ),
            (
                "make a cgroup of its own",
                "mkdir /sys/fs/cgroup/escape".to_owned(),
            ),
        ] {
            let (code, _, _) = run(&client, &["sh", "-c", &script], user, None).await;
            assert_ne!(code, 0, "{user:?} could {what}: {script}");
        }
        // Still in the box's cgroup (v1: the pids hierarchy's; cgroup2: the only one).
        let own = "grep -E ':pids:' /proc/self/cgroup || grep '^0::' /proc/self/cgroup";
        let cgroup = run_ok(&client, &["sh", "-c", own], user).await;
        assert!(
            cgroup.trim().ends_with(":/box"),
            "{user:?} is outside the box cgroup: {cgroup}"
        );
    }
    // (Every process but berth-init is in the box cgroup:
    // berth_init_is_outside_the_box_cgroup_and_the_oom_killers_reach.)
    let mount = "mkdir -p /tmp/cg && mount -t cgroup2 none /tmp/cg";
    let (code, _, _) = run(&client, &["sh", "-c", mount], BoxUser::User, None).await;
    assert_ne!(code, 0, "the user mounted a cgroup2 of its own");
    assert_eq!(
        run_ok(&client, &["cat", &format!("{dir}/pids.max")], BoxUser::Root)
            .await
            .trim(),
        "64"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}
