//! A running box that ends on its own is noticed by the daemon at once, without any call
//! to the box: its state leaves `running` with a reason (`berth box show`), nothing of it
//! is left running, and the next call boots it again.

mod common;

use std::time::{Duration, Instant};

use common::{e2e_skip_reason, stderr, vm_processes, Daemon};

/// SIGKILL to a qemu box's QEMU: the box is `failed` with a reason naming the kill within
/// seconds, with no call in between; its channel bridge is gone too; the event log has
/// the change; the next `berth exec` boots it again.
#[test]
fn a_killed_qemu_box_is_failed_at_once_and_boots_again() {
    let Some(daemon) = Daemon::start_offering_qemu() else {
        return;
    };
    daemon.berth_ok(&[
        "box",
        "create",
        "vm1",
        "--runtime",
        "qemu",
        "--template",
        "minimal",
    ]);
    assert_eq!(
        daemon.berth_ok(&["exec", "vm1", "--", "echo", "up"]),
        "up\n"
    );
    let qemu: Vec<i32> = vm_processes(daemon.dir())
        .into_iter()
        .filter(|(_, cmd)| cmd.contains("qemu-system"))
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(qemu.len(), 1, "{:?}", vm_processes(daemon.dir()));
    // SAFETY: kill(2) of the box's QEMU (found by its command line just now).
    assert_eq!(unsafe { libc::kill(qemu[0], libc::SIGKILL) }, 0);
    let killed = Instant::now();

    let shown = daemon.wait_for_box("vm1", Duration::from_secs(20), |b| b["state"] != "running");
    eprintln!("noticed after {:?}: {shown}", killed.elapsed());
    assert_eq!(shown["state"], "failed", "{shown}");
    assert_eq!(
        shown["state_reason"], "QEMU was killed by signal 9 (SIGKILL)",
        "{shown}"
    );
    let left = vm_processes(daemon.dir());
    assert!(left.is_empty(), "left running after the crash: {left:?}");
    let logs = daemon.berth_ok(&["logs", "vm1"]);
    assert!(
        logs.contains("SIGKILL"),
        "the state change is not in the log: {logs}"
    );

    // The next call wakes the failed box.
    assert_eq!(
        daemon.berth_ok(&["exec", "vm1", "--", "echo", "again"]),
        "again\n"
    );
    let shown = daemon.wait_for_box("vm1", Duration::from_secs(1), |_| true);
    assert_eq!(shown["state"], "running", "{shown}");

    // A stop by the daemon is never taken for a crash.
    daemon.berth_ok(&["box", "stop", "vm1"]);
    let shown = daemon.wait_for_box("vm1", Duration::from_secs(1), |_| true);
    assert_eq!(
        (shown["state"].as_str(), shown["state_reason"].as_str()),
        (Some("stopped"), None),
        "{shown}"
    );
    daemon.berth_ok(&["box", "rm", "vm1"]);
    let left = vm_processes(daemon.dir());
    assert!(left.is_empty(), "left running after box rm: {left:?}");
}

/// The sandbox waits on its init's pidfd: a box whose container init is killed from the
/// host is `failed` with a reason naming the signal at once, with no call in between, and
/// the next call boots it again.
#[test]
fn a_sandbox_box_whose_init_is_killed_is_failed_with_the_signal() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "sb1"]);
    assert_eq!(
        daemon.berth_ok(&["exec", "sb1", "--", "echo", "up"]),
        "up\n"
    );
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(daemon.dir().join("oci"))
        .args(["list", "--format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "runc list: {}", stderr(&out));
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let pids: Vec<i32> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == "running")
        .filter_map(|c| c["pid"].as_i64())
        .map(|pid| pid as i32)
        .collect();
    assert_eq!(pids.len(), 1, "{list}");
    // SAFETY: kill(2) of the box's init, as runc reports it.
    assert_eq!(unsafe { libc::kill(pids[0], libc::SIGKILL) }, 0);
    let killed = Instant::now();

    let shown = daemon.wait_for_box("sb1", Duration::from_secs(10), |b| b["state"] != "running");
    eprintln!("noticed after {:?}: {shown}", killed.elapsed());
    assert_eq!(shown["state"], "failed", "{shown}");
    assert_eq!(
        shown["state_reason"], "berth-init was killed by signal 9 (SIGKILL)",
        "{shown}"
    );
    assert!(
        daemon.running_containers().is_empty(),
        "{:?}",
        daemon.running_containers()
    );
    assert_eq!(
        daemon.berth_ok(&["exec", "sb1", "--", "echo", "again"]),
        "again\n"
    );
}
