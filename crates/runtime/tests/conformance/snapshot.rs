//! The memory a box holds, and snapshots where a backend cannot take one.

use berth_protocol::guest::BoxUser;
use berth_runtime::{Limits, RuntimeError, RuntimeStatus};

use crate::common::{run_ok, Fixture};
use crate::GRACE;

/// A running box holds memory the host can measure (its cgroup's charge, or its VMM's
/// RSS), at least what a process in it keeps touched; a stopped one holds none.
pub async fn memory_held_is_measured_while_running_and_none_once_stopped(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let before = fx.runtime.memory_held(&spec.id).await.unwrap();
    let before = before.expect("a running box holds memory");
    assert!(before > 0);
    // 40 MiB written to a tmpfs in the box (/dev/shm, RAM while the file exists). A
    // container's charge grows by most of it; a VM's guest may reuse pages it touched while
    // booting, so there the charge need only cover the 40 MiB (measuring the wrong cgroup,
    // vhost-device-vsock's few MiB, would not).
    run_ok(
        &client,
        &[
            "sh",
            "-c",
            "head -c 41943040 /dev/zero > /dev/shm/held && echo ok",
        ],
        BoxUser::User,
    )
    .await;
    let after = fx.runtime.memory_held(&spec.id).await.unwrap().unwrap();
    eprintln!("memory held: {before} bytes idle, {after} bytes with 40 MiB more");
    let floor = if fx.is_vm() {
        40 << 20
    } else {
        before + (32 << 20)
    };
    assert!(
        after >= floor,
        "40 MiB more in the box, memory held {before} -> {after}"
    );
    fx.runtime.stop(&spec.id, GRACE).await.unwrap();
    assert_eq!(fx.runtime.memory_held(&spec.id).await.unwrap(), None);
}

/// Where the backend has no snapshot, asking for one says why and leaves the box as it
/// was: running, answering, holding its memory.
pub async fn snapshot_is_refused_with_the_reason_where_unsupported(fx: &Fixture) {
    assert!(!fx.runtime.capabilities().snapshot);
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    match fx.runtime.snapshot(&spec.id).await {
        Err(e @ RuntimeError::Unsupported { .. }) => {
            let text = e.to_string();
            assert!(text.contains("snapshot: "), "{text}");
            eprintln!("refused as it should be: {text}");
        }
        other => panic!("snapshot must be refused with the reason, got {other:?}"),
    }
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Running
    );
    assert_eq!(
        run_ok(&client, &["echo", "on"], BoxUser::User).await.trim(),
        "on"
    );
    assert!(fx.runtime.memory_held(&spec.id).await.unwrap().is_some());
    assert_eq!(fx.runtime.snapshot_size(&spec.id).await.unwrap(), None);
    fx.runtime.stop(&spec.id, GRACE).await.unwrap();
}
