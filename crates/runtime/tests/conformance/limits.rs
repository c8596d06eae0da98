//! A box that misbehaves hurts only itself: fork bombs, too many processes, memory hogs,
//! a full volume.

use std::time::{Duration, Instant};

use berth_protocol::guest::BoxUser;
use berth_protocol::harness::{DeliverRequest, HarnessConfig};
use berth_runtime::{GuestClient, Limits};

use crate::common::{self, run, run_ok, Fixture};
use crate::GRACE;

/// Whether `client` answers `echo ok` within `limit`.
async fn answers_within(client: &GuestClient, limit: Duration) -> bool {
    tokio::time::timeout(limit, run(client, &["echo", "ok"], BoxUser::User, None))
        .await
        .is_ok_and(|(code, out, _)| code == 0 && out.trim() == "ok")
}

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

/// A memory hog is killed by the box's memory limit (the sandbox's memory cgroup; a
/// VM's guest RAM and the guest's OOM killer), not the box.
pub async fn memory_hog_is_killed_and_the_box_survives(fx: &Fixture) {
    // The sandbox: one 200 MiB buffer against a 64 MiB memory cgroup. A VM: awk doubles a
    // string to 16 MiB, then keeps 32 MiB copies of it, so no single allocation is big
    // enough for the guest's overcommit check to refuse (one big buffer would only make
    // malloc fail) and the guest's OOM killer has to stop it. Every step writes what it
    // allocates: a few seconds of work even under TCG (the shell variable grown through
    // `tr` this replaced took over 120 s on a loaded host, and the exec's timeout killed
    // it before the OOM killer did).
    let (memory_mib, hog, what) = if fx.is_vm() {
        (
            128,
            "awk 'BEGIN { s = \"x\"; while (length(s) < 16777216) s = s s; \
             for (;;) kept[n++] = s s }'",
            "32 MiB strings without end",
        )
    } else {
        (
            64,
            "dd if=/dev/zero of=/dev/null bs=200M count=1",
            "a 200 MiB buffer",
        )
    };
    let spec = fx.spec(Limits {
        memory_mib,
        ..Limits::default()
    });
    let booting = Instant::now();
    let client = fx.runtime.start(&spec).await.expect("start").client;
    // How long the hog may take: scaled by how fast this guest runs now (its boot).
    let boot = booting.elapsed();
    let limit = common::scaled_by(boot, 20);
    let hogging = Instant::now();
    let (code, _, err) =
        tokio::time::timeout(limit, run(&client, &["sh", "-c", hog], BoxUser::User, None))
            .await
            .unwrap_or_else(|_| panic!("{what} still ran after {limit:?}: nothing stopped it"));
    eprintln!(
        "boot {boot:?}; {what} ended in {:?} (allowed {limit:?})",
        hogging.elapsed()
    );
    assert_ne!(code, 0, "{what} fit in a {memory_mib} MiB box: {err}");
    if fx.is_vm() {
        assert_eq!(code, 137, "the hog was not SIGKILLed: {err}");
        let log = run_ok(&client, &["dmesg"], BoxUser::Root).await;
        assert!(
            log.contains("Out of memory") || log.contains("oom-kill"),
            "the guest's OOM killer did not act: {log}"
        );
    }
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    common::assert_berth_init_is_pid_1(&client).await;
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// The directory holding the box's `pids.max`, as the box sees it: a VM's box cgroup, the
/// sandbox's own cgroup on a v1 host (the pids hierarchy) or a v2 host (the namespace's
/// root).
async fn pids_cgroup_dir(client: &GuestClient) -> String {
    let find = "for d in /sys/fs/cgroup/box /sys/fs/cgroup/pids/box /sys/fs/cgroup/pids \
                /sys/fs/cgroup; do \
                if [ -e $d/pids.max ]; then echo $d; exit 0; fi; done; exit 1";
    let dir = run_ok(client, &["sh", "-c", find], BoxUser::User).await;
    dir.trim().to_owned()
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

/// A box whose user filled the volume keeps working: it answers, berth-init still
/// journals messages and events (the volume keeps 1% of its blocks for root, which
/// berth-init is), it stops and boots again full with every file intact, and deleting the
/// filler frees the space. Both backends give the box an ext4 image of `disk_mib` (the
/// sandbox loop-mounts it); the check refuses to fill a `/home/user` that is not one.
pub async fn a_full_volume_leaves_the_box_working(fx: &Fixture) {
    let mut spec = fx.spec(Limits::default());
    // Small, so filling it is quick (a VM's test volume is this size already).
    spec.disk_mib = 64;
    // `cat` echoes each delivered message back: one message-journal and one event-journal
    // write per message.
    let harness: HarnessConfig =
        serde_json::from_value(serde_json::json!({"command": ["/bin/cat"], "ack": "write"}))
            .unwrap();
    spec.harness = Some(harness);
    let client = fx.runtime.start(&spec).await.expect("start").client;
    run_ok(
        &client,
        &["sh", "-c", "echo kept > /home/user/kept"],
        BoxUser::User,
    )
    .await;
    // Fill only a volume of the box's own: never a host directory (the host's disk).
    let df = run_ok(&client, &["df", "-kP", "/home/user"], BoxUser::Root).await;
    let total_kib: u64 = df
        .lines()
        .nth(1)
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(
        total_kib <= spec.disk_mib * 1024,
        "/home/user is not the box's {} MiB volume: {df}",
        spec.disk_mib
    );
    let fill = "dd if=/dev/zero of=/home/user/fill bs=1M";
    let (code, _, err) = run(
        &client,
        &["sh", "-c", fill],
        BoxUser::User,
        Some(Duration::from_secs(300)),
    )
    .await;
    assert_ne!(code, 0, "dd filled no volume: {err}");
    assert!(err.contains("No space left on device"), "{err}");
    let (code, _, _) = run(
        &client,
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/home/user/more bs=64k count=16 && sync",
        ],
        BoxUser::User,
        None,
    )
    .await;
    assert_ne!(code, 0, "the user wrote to a full volume");
    // So does the files API as the user (the agent's identity for files), and says why.
    match client
        .write_file(
            &common::file("/home/user/by-api"),
            bytes::Bytes::from(vec![7u8; 256 * 1024]),
        )
        .await
    {
        Err(berth_runtime::GuestError::Remote { status: 507, body }) => {
            assert_eq!(
                body.error.code,
                berth_protocol::ErrorCode::InsufficientStorage
            );
        }
        other => panic!("a file write to a full volume must get 507, got {other:?}"),
    }
    eprintln!(
        "full: {}",
        run_ok(&client, &["df", "-k", "/home/user"], BoxUser::Root).await
    );

    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    deliver_and_see_echoed(&client, "msg_full_1").await;
    // berth-init's state dir takes root's writes from the reserve: 256 KiB, far more than
    // the few blocks a full volume may still show free, well under the 1% (640 KiB).
    run_ok(
        &client,
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/var/lib/berth/probe bs=4k count=64 && sync",
        ],
        BoxUser::Root,
    )
    .await;

    // Stop and boot again with the volume still full.
    fx.runtime
        .stop(&spec.id, GRACE)
        .await
        .expect("stop a full box");
    let again = common::next_boot(&spec);
    let client = fx
        .runtime
        .start(&again)
        .await
        .expect("boot with a full volume")
        .client;
    assert_eq!(
        run_ok(&client, &["cat", "/home/user/kept"], BoxUser::User)
            .await
            .trim(),
        "kept"
    );
    run_ok(&client, &["test", "-s", "/home/user/fill"], BoxUser::User).await;
    run_ok(
        &client,
        &["test", "-s", "/var/lib/berth/probe"],
        BoxUser::Root,
    )
    .await;
    deliver_and_see_echoed(&client, "msg_full_2").await;

    // Deleting the filler frees the space.
    run_ok(&client, &["rm", "/home/user/fill"], BoxUser::User).await;
    run_ok(
        &client,
        &[
            "dd",
            "if=/dev/zero",
            "of=/home/user/after",
            "bs=1M",
            "count=8",
        ],
        BoxUser::User,
    )
    .await;
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// Delivers one message to a `cat` harness and waits for its echo among the events.
async fn deliver_and_see_echoed(client: &GuestClient, id: &str) {
    let content = format!("text of {id}");
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        client.deliver(&DeliverRequest {
            id: id.to_owned(),
            content: content.clone(),
        }),
    )
    .await
    .unwrap_or_else(|_| panic!("{id} was not delivered within 60 s"))
    .unwrap_or_else(|e| panic!("deliver {id}: {e}"));
    assert!(!answer.duplicate, "{id} was taken for a duplicate");
    let mut events = client.events(0).await.expect("events");
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(event) = events.next_frame().await.expect("event stream") {
            if event.data.to_string().contains(&content) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(seen, Ok(true), "the echo of {id} was not journalled");
}

/// One round of the host's everyday calls into the box, each within `limit`: an exec as
/// the user and as root, a file written and read back. `Err` says which failed and how.
async fn host_calls_answer(
    client: &GuestClient,
    limit: Duration,
    round: usize,
    attack: Attack,
) -> Result<(), String> {
    for user in [BoxUser::User, BoxUser::Root] {
        // The process's own timeout ends well inside `limit`, so berth-init always has
        // its answer to give in time.
        let answer =
            tokio::time::timeout(limit, run(client, &["echo", "ok"], user, Some(limit / 2))).await;
        match answer {
            Ok((0, out, _)) if out.trim() == "ok" => {}
            // Born in a box at its memory limit, the exec's own process may be the one the
            // box's OOM killer picks (or thrash until its timeout): berth-init answered.
            Ok((137, _, _)) if attack == Attack::Memory => {}
            Ok(other) => return Err(format!("exec as {user:?}: {other:?}")),
            Err(_) => return Err(format!("exec as {user:?}: no answer within {limit:?}")),
        }
    }
    // File calls are berth-init's own work, outside the box's cgroup: they always succeed.
    let file = common::file(&format!("/home/user/during-{round}"));
    let content = bytes::Bytes::from(format!("round {round}"));
    let written = tokio::time::timeout(limit, client.write_file(&file, content.clone())).await;
    match written {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("write_file: {e}")),
        Err(_) => return Err(format!("write_file: no answer within {limit:?}")),
    }
    match tokio::time::timeout(limit, client.read_file(&file)).await {
        Ok(Ok(read)) if read == content => Ok(()),
        Ok(Ok(read)) => Err(format!("read_file gave {read:?}")),
        Ok(Err(e)) => Err(format!("read_file: {e}")),
        Err(_) => Err(format!("read_file: no answer within {limit:?}")),
    }
}

/// What fills the box while the host calls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attack {
    /// The process limit: the box's processes are refused, berth-init's are not.
    Processes,
    /// The memory limit: a process the host starts in the box may be OOM-killed there.
    Memory,
}

/// Rounds of calls the host makes at least, even if the attack ended before.
const MIN_ROUNDS: usize = 10;

/// Runs the host's calls ([`host_calls_answer`]) until `attack` has ended and at least
/// [`MIN_ROUNDS`] rounds answered, asserting each round; returns how many rounds answered.
async fn answers_throughout(
    fx: &Fixture,
    client: &GuestClient,
    attack: &tokio::task::JoinHandle<(i32, String, String)>,
    kind: Attack,
    what: &str,
) -> usize {
    let mut rounds = 0;
    let mut slowest = Duration::ZERO;
    while !attack.is_finished() || rounds < MIN_ROUNDS {
        let t0 = Instant::now();
        // Generous: an exec's process lives in the full box (its OOM kills come first);
        // without the defence the calls failed outright or never returned.
        if let Err(why) = host_calls_answer(client, fx.patience() * 2, rounds, kind).await {
            panic!("during {what}, after {rounds} rounds: {why}");
        }
        slowest = slowest.max(t0.elapsed());
        rounds += 1;
    }
    eprintln!("{rounds} rounds of exec and file calls answered during {what}, slowest {slowest:?}");
    rounds
}

/// The box's own `box` cgroup in the hierarchy holding `file`, as the box sees it, or its
/// parent when there is none.
async fn box_cgroup_file(client: &GuestClient, file: &str) -> String {
    let find = format!(
        "for d in /sys/fs/cgroup/box /sys/fs/cgroup/pids/box /sys/fs/cgroup/memory/box \
         /sys/fs/cgroup/pids /sys/fs/cgroup/memory /sys/fs/cgroup; do \
         if [ -e $d/{file} ]; then echo $d/{file}; exit 0; fi; done; exit 1"
    );
    run_ok(client, &["sh", "-c", &find], BoxUser::Root)
        .await
        .trim()
        .to_owned()
}

/// How long the fork bomb runs (its exec's timeout) while the host calls in.
const BOMB_RUNS: Duration = Duration::from_secs(15);

/// A fork bomb fills the box's process limit, and the host's exec and file calls into that
/// same box keep answering throughout: berth-init forks outside the box's cgroup (its own
/// has a reserve), so a full box never stops it starting a process.
pub async fn the_host_reaches_a_box_through_its_fork_bomb(fx: &Fixture) {
    let mut spec = fx.spec(Limits {
        pids: 64,
        ..Limits::default()
    });
    let test = "the_host_reaches_a_box_through_its_fork_bomb";
    let Some(probe) = crate::isolation::add_probe(fx, &mut spec, test) else {
        return;
    };
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let events = box_cgroup_file(&client, "pids.events").await;
    let bomb = {
        let client = client.clone();
        tokio::spawn(async move {
            // Every process forks on and tries again where refused (a shell's fork bomb
            // empties the box as its shells exit on a refused fork), until the exec's
            // timeout kills the whole group.
            run(
                &client,
                &[&probe, "fork-bomb"],
                BoxUser::User,
                Some(BOMB_RUNS),
            )
            .await
        })
    };
    // Full: the kernel refused the bomb's forks, and its processes fill the box.
    common::wait_until_within(fx.patience(), || async {
        let (_, out, _) = run(&client, &["cat", &events], BoxUser::Root, None).await;
        out.lines()
            .find_map(|l| l.strip_prefix("max "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    })
    .await;
    // The box fills up (a refused fork was seen; on a slow guest its processes take a
    // moment to reach the limit, and each one that exits is forked again).
    let current = box_cgroup_file(&client, "pids.current").await;
    common::wait_until_within(fx.patience(), || async {
        let count = run_ok(&client, &["cat", &current], BoxUser::Root).await;
        eprintln!("the bomb holds {} of the box's 64 processes", count.trim());
        count.trim().parse::<u64>().is_ok_and(|n| n >= 60)
    })
    .await;
    answers_throughout(fx, &client, &bomb, Attack::Processes, "a fork bomb").await;
    common::wait_until_within(fx.patience(), || async {
        host_calls_answer(
            &client,
            Duration::from_secs(5),
            usize::MAX,
            Attack::Processes,
        )
        .await
        .is_ok()
    })
    .await;
    common::assert_berth_init_is_pid_1(&client).await;
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// Many small memory hogs fill the box's memory: each is smaller than berth-init, so the
/// OOM killer would pick berth-init among them. It never does: berth-init is outside the
/// box's memory cgroup with a reserve of its own and `oom_score_adj` −1000. The host's
/// calls answer throughout, the hogs are killed, the box keeps its boot.
pub async fn the_host_reaches_a_box_through_its_memory_hogs(fx: &Fixture) {
    // The sandbox's box gets 64 MiB of memory; a VM 128 MiB of RAM (less does not boot).
    let (memory_mib, hogs) = if fx.is_vm() { (128, 300) } else { (64, 200) };
    let mut spec = fx.spec(Limits {
        memory_mib,
        pids: 1024,
        ..Limits::default()
    });
    let test = "the_host_reaches_a_box_through_its_memory_hogs";
    let Some(probe) = crate::isolation::add_probe(fx, &mut spec, test) else {
        return;
    };
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let boot_id = client.info().await.expect("info").boot_id;
    // Each hog a process holding 1.5 MiB: far more than a shell, less than berth-init;
    // they hold the box full until the exec's timeout kills them.
    let hogs_hold = fx.patience();
    let attack = {
        let client = client.clone();
        let hogs = hogs.to_string();
        tokio::spawn(async move {
            run(
                &client,
                &[&probe, "memory-hogs", &hogs, "1536"],
                BoxUser::User,
                Some(hogs_hold),
            )
            .await
        })
    };
    answers_throughout(fx, &client, &attack, Attack::Memory, "memory hogs").await;
    // The hogs are gone once the box runs a command again.
    common::wait_until_within(fx.patience() * 2, || async {
        run(&client, &["true"], BoxUser::Root, Some(fx.patience()))
            .await
            .0
            == 0
    })
    .await;
    let info = client.info().await.expect("info after the hogs");
    assert_eq!(
        info.boot_id, boot_id,
        "berth-init was killed and the box booted again"
    );
    common::assert_berth_init_is_pid_1(&client).await;
    // The limit held: the OOM killer acted inside the box.
    let log = if fx.is_vm() {
        run_ok(&client, &["dmesg"], BoxUser::Root).await
    } else {
        let file = box_cgroup_file(&client, "memory.oom_control").await;
        run_ok(&client, &["cat", &file], BoxUser::Root).await
    };
    let killed = log.contains("Out of memory")
        || log.contains("oom-kill")
        || log
            .lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0);
    assert!(killed, "the OOM killer did not act in the box: {log}");
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// The OOM killer never picks berth-init (`oom_score_adj` −1000) and everything it starts
/// gets the default, 0; every process it starts is in the box's cgroup, berth-init is not.
pub async fn berth_init_is_outside_the_box_cgroup_and_the_oom_killers_reach(fx: &Fixture) {
    let mut spec = fx.spec(Limits::default());
    let harness: HarnessConfig =
        serde_json::from_value(serde_json::json!({"command": ["/bin/cat"], "ack": "write"}))
            .unwrap();
    spec.harness = Some(harness);
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let init = run_ok(&client, &["cat", "/proc/1/oom_score_adj"], BoxUser::User).await;
    if !fx.is_vm() && !host_root_may_lower_oom_score_adj() {
        berth_testkit::skip(
            "cap-sys-resource",
            format!(
                "berth-init's oom_score_adj -1000: host root here lacks CAP_SYS_RESOURCE, \
                 so nobody may lower it (berth-init has {})",
                init.trim()
            ),
        );
    } else {
        assert_eq!(init.trim(), "-1000", "berth-init's oom_score_adj");
    }
    for user in [BoxUser::User, BoxUser::Root] {
        let own = run_ok(&client, &["cat", "/proc/self/oom_score_adj"], user).await;
        assert_eq!(own.trim(), "0", "{user:?}'s oom_score_adj");
    }
    // Every process but berth-init (and a VM's kernel threads, which have no command line)
    // is in the box's cgroup in every hierarchy that holds a limit.
    let list = "for p in /proc/[0-9]*; do n=${p#/proc/}; \
                cmd=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); [ -n \"$cmd\" ] || continue; \
                printf '%s %s%s\\n' $n \"$(grep -E '^0::|:pids:|:memory:' $p/cgroup | tr '\\n' ' ')\" \"$cmd\"; done";
    let procs = run_ok(&client, &["sh", "-c", list], BoxUser::Root).await;
    // The cgroups of a process's line: its v1 `pids` and `memory` ones, or (cgroup2 only)
    // its `0::` one; a v1 host's controller-less cgroup2 line does not count.
    let in_box = |line: &str| {
        let groups: Vec<&str> = line
            .split_whitespace()
            .filter(|w| w.contains(":/"))
            .collect();
        let v1: Vec<&str> = groups
            .iter()
            .copied()
            .filter(|g| !g.starts_with("0::"))
            .collect();
        let limited = if v1.is_empty() { groups } else { v1 };
        !limited.is_empty() && limited.iter().all(|g| g.ends_with(":/box"))
    };
    let init_line = procs.lines().find(|l| l.starts_with("1 ")).expect("pid 1");
    assert!(
        !in_box(init_line) && init_line.contains(":/"),
        "berth-init: {init_line}"
    );
    let outside: Vec<&str> = procs
        .lines()
        .filter(|l| !l.starts_with("1 ") && !in_box(l))
        .collect();
    assert!(
        outside.is_empty(),
        "outside the box cgroup: {outside:?}\n{procs}"
    );
    assert!(
        procs.lines().any(|l| l.ends_with("/bin/cat ")),
        "the harness is not listed: {procs}"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// Whether this test's host root holds CAP_SYS_RESOURCE (bit 24), which lowering any
/// process's `oom_score_adj` needs.
fn host_root_may_lower_oom_score_adj() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let caps = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(caps.trim(), 16).ok()
        })
        .is_some_and(|caps| caps & (1 << 24) != 0)
}
