//! The host reaches a box whose processes or memory are full: its exec and file calls
//! answer throughout a fork bomb and memory hogs.

use std::time::{Duration, Instant};

use berth_protocol::guest::BoxUser;
use berth_runtime::{GuestClient, Limits};

use crate::common::{self, run, run_ok, Fixture};
use crate::GRACE;

use super::fixtures::box_cgroup_file;

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
        slowest = slowest.max(answers_once(fx, client, rounds, kind, what).await);
        rounds += 1;
    }
    eprintln!("{rounds} rounds of exec and file calls answered during {what}, slowest {slowest:?}");
    rounds
}

/// One round of [`host_calls_answer`], asserted; returns how long it took.
async fn answers_once(
    fx: &Fixture,
    client: &GuestClient,
    round: usize,
    kind: Attack,
    what: &str,
) -> Duration {
    let t0 = Instant::now();
    // Generous: an exec's process lives in the full box (its OOM kills come first);
    // without the defence the calls failed outright or never returned.
    if let Err(why) = host_calls_answer(client, fx.patience() * 2, round, kind).await {
        panic!("during {what}, after {round} rounds: {why}");
    }
    t0.elapsed()
}

/// A fork bomb fills the box's process limit, and the host's exec and file calls into that
/// same box keep answering throughout: berth-init forks outside the box's cgroup (its own
/// has a reserve), so a full box never stops it starting a process.
///
/// The bomb runs until the test has made its rounds and then drops the bomb's exec, which
/// SIGKILLs its whole group: a bomb that ran for a fixed time (even three of the guest's
/// boots) ended before a slow TCG guest had filled the box and answered the rounds.
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
    let current = box_cgroup_file(&client, "pids.current").await;
    let bomb = {
        let client = client.clone();
        // Every process forks on and tries again where refused (a shell's fork bomb
        // empties the box as its shells exit on a refused fork). The timeout only
        // backs up the drop below, should the test fail before it.
        let backstop = fx.patience() * 20;
        tokio::spawn(async move {
            run(
                &client,
                &[&probe, "fork-bomb"],
                BoxUser::User,
                Some(backstop),
            )
            .await
        })
    };
    // Full: the kernel refused the bomb's forks, and its processes fill the box.
    common::wait_until_within(fx.patience() * 2, || async {
        let (_, out, _) = run(&client, &["cat", &events], BoxUser::Root, None).await;
        out.lines()
            .find_map(|l| l.strip_prefix("max "))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0)
    })
    .await;
    // The box fills up (a refused fork was seen; on a slow guest its processes take a
    // moment to reach the limit, and each one that exits is forked again).
    common::wait_until_within(fx.patience() * 2, || async {
        assert!(
            !bomb.is_finished(),
            "the bomb's exec returned before it filled the box"
        );
        let count = run_ok(&client, &["cat", &current], BoxUser::Root).await;
        eprintln!("the bomb holds {} of the box's 64 processes", count.trim());
        count.trim().parse::<u64>().is_ok_and(|n| n >= 60)
    })
    .await;
    let mut slowest = Duration::ZERO;
    for round in 0..MIN_ROUNDS {
        slowest =
            slowest.max(answers_once(fx, &client, round, Attack::Processes, "a fork bomb").await);
    }
    assert!(!bomb.is_finished(), "the bomb ended during the rounds");
    eprintln!("{MIN_ROUNDS} rounds of exec and file calls answered during a fork bomb, slowest {slowest:?}");
    bomb.abort();
    // The bomb's group is killed with its exec, and the box is the host's again.
    common::wait_until_within(fx.patience() * 2, || async {
        let count = run_ok(&client, &["cat", &current], BoxUser::Root).await;
        count.trim().parse::<u64>().is_ok_and(|n| n < 8)
    })
    .await;
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
