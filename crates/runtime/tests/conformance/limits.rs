//! A box that misbehaves hurts only itself: fork bombs and memory hogs.

use std::time::{Duration, Instant};

use berth_protocol::guest::BoxUser;
use berth_runtime::{GuestClient, Limits};

use crate::common::{self, run, run_ok, Backend, Fixture};
use crate::GRACE;

/// Whether `client` answers `echo ok` within `limit`.
async fn answers_within(client: &GuestClient, limit: Duration) -> bool {
    tokio::time::timeout(limit, run(client, &["echo", "ok"], BoxUser::User, None))
        .await
        .is_ok_and(|(code, out, _)| code == 0 && out.trim() == "ok")
}

/// A fork bomb is contained: its neighbour answers throughout, the host stops the box and
/// boots it again. The sandbox enforces `limits.pids` with the pids cgroup, so the box
/// itself answers again at once. A VM does not enforce `limits.pids` (the qemu backend
/// passes no pids limit to the guest): its guest kernel has its own process table and
/// memory, so the bomb fills only that guest, which may stay unusable until stopped.
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
    match fx.backend() {
        Backend::Sandbox => {
            common::wait_until_within(fx.patience(), || {
                answers_within(&client, Duration::from_secs(5))
            })
            .await;
            eprintln!("the bombed box answered again after {:?}", t1.elapsed());
        }
        Backend::Qemu => {
            // Without a pids limit the bomb may leave the guest thrashing (no swap, its
            // memory full of shells) long after the exec timeout: the host must still be
            // able to stop it and boot it again.
            let mut recovered = false;
            while !recovered && t1.elapsed() < Duration::from_secs(30) {
                recovered = answers_within(&client, Duration::from_secs(5)).await;
            }
            if recovered {
                eprintln!("the bombed VM answered again after {:?}", t1.elapsed());
            } else {
                eprintln!("KNOWN GAP: the bombed VM did not answer within 30 s (no pids limit)");
            }
        }
    }
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
    // The sandbox: one 200 MiB buffer against a 64 MiB memory cgroup. A VM: a shell
    // variable that grows in small steps, so the guest's overcommit check never refuses
    // an allocation and the guest's OOM killer has to stop it (one big buffer would only
    // make malloc fail).
    let (memory_mib, hog, what) = match fx.backend() {
        Backend::Sandbox => (
            64,
            "dd if=/dev/zero of=/dev/null bs=200M count=1",
            "a 200 MiB buffer",
        ),
        Backend::Qemu => (
            128,
            "x=$(dd if=/dev/zero bs=1M count=400 2>/dev/null | tr '\\0' x); echo ${#x}",
            "a 400 MiB shell variable",
        ),
    };
    let spec = fx.spec(Limits {
        memory_mib,
        ..Limits::default()
    });
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let (code, _, err) = run(
        &client,
        &["sh", "-c", hog],
        BoxUser::User,
        Some(Duration::from_secs(120)),
    )
    .await;
    assert_ne!(code, 0, "{what} fit in a {memory_mib} MiB box: {err}");
    if fx.backend() == Backend::Qemu {
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
