//! The memory limit: a hog is killed, not the box; the OOM killer never reaches berth-init.

use std::time::Instant;

use berth_protocol::guest::BoxUser;
use berth_protocol::harness::HarnessConfig;
use berth_runtime::Limits;

use crate::common::{self, run, run_ok, Fixture};
use crate::GRACE;

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
