//! A qemu box snapshotted through the daemon: `berth box snapshot` ends its VMM (no QEMU
//! left, no memory held, its snapshot on disk) and the next call restores it with the same
//! processes and memory, on a new boot.

mod common;

use std::time::{Duration, Instant};

use common::{vm_processes, Daemon};

/// A shell counting in its own memory: `<its pid> <count>` in /tmp/counter.
const COUNTER: &str =
    "i=0; while :; do i=$((i+1)); echo \"$$ $i\" > /tmp/counter; sleep 0.05; done";

/// `(pid, count)` once the counter has passed `past`.
fn counted_past(daemon: &Daemon, past: u64) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = daemon.berth(&["exec", "vm1", "--", "cat", "/tmp/counter"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut parts = text
            .split_whitespace()
            .map(|p| p.parse::<u64>().unwrap_or(0));
        let now = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if out.status.success() && now.1 > past {
            return now;
        }
        assert!(Instant::now() < deadline, "the counter stays at {now:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_snapshotted_qemu_box_holds_no_memory_and_wakes_with_the_same_processes() {
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
    daemon.berth_ok(&[
        "exec",
        "--background",
        "--no-keep-awake",
        "vm1",
        "--",
        "sh",
        "-c",
        COUNTER,
    ]);
    let before = counted_past(&daemon, 2);
    let running = daemon.wait_for_box("vm1", Duration::from_secs(1), |_| true);
    let held = running["memory_bytes"]
        .as_u64()
        .expect("a running box holds memory");
    assert!(held > 32 << 20, "{running}");

    let t0 = Instant::now();
    daemon.berth_ok(&["box", "snapshot", "vm1"]);
    eprintln!("snapshot answered after {:?}", t0.elapsed());
    let shown = daemon.wait_for_box("vm1", Duration::from_secs(1), |_| true);
    assert_eq!(shown["state"], "snapshotted", "{shown}");
    assert!(shown["memory_bytes"].is_null(), "{shown}");
    let on_disk = shown["snapshot_bytes"]
        .as_u64()
        .expect("its snapshot's size");
    assert!(on_disk > 0, "{shown}");
    eprintln!("held {held} bytes running; snapshotted: none held, {on_disk} on disk");
    let left = vm_processes(daemon.dir());
    assert!(left.is_empty(), "a snapshotted box's VMM runs on: {left:?}");

    // The next call restores it: the same counting process, on from where it was.
    let t0 = Instant::now();
    let after = counted_past(&daemon, before.1);
    eprintln!("restored and answered after {:?}", t0.elapsed());
    assert_eq!(after.0, before.0, "the same process after the restore");
    let shown = daemon.wait_for_box("vm1", Duration::from_secs(1), |_| true);
    assert_eq!(shown["state"], "running", "{shown}");
    assert!(shown["snapshot_bytes"].is_null(), "{shown}");

    daemon.berth_ok(&["box", "rm", "vm1"]);
    let left = vm_processes(daemon.dir());
    assert!(left.is_empty(), "left running after box rm: {left:?}");
}
