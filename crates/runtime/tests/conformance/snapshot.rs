//! The memory a box holds, and snapshots where a backend cannot take one.

use std::time::{Duration, Instant};

use berth_protocol::guest::{BoxUser, EGRESS_TLS_PORT};
use berth_runtime::{Limits, RuntimeError, RuntimeStatus};

use crate::common::{self, run, run_ok, Fixture};
use crate::GRACE;

/// A running box holds memory the host can measure (its cgroup's charge, or its VMM's
/// RSS), at least what a process in it keeps touched; a stopped one holds none.
pub async fn memory_held_is_measured_while_running_and_none_once_stopped(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let booting = Instant::now();
    let client = fx.runtime.start(&spec).await.expect("start").client;
    // Writing 40 MiB takes a TCG guest on a loaded machine a while: three of its boots.
    let write_within = Duration::from_secs(30).max(booting.elapsed() * 3);
    let before = fx.runtime.memory_held(&spec.id).await.unwrap();
    let before = before.expect("a running box holds memory");
    assert!(before > 0);
    // 40 MiB written to a tmpfs in the box (/dev/shm, RAM while the file exists). A
    // container's charge grows by most of it; a VM's guest may reuse pages it touched while
    // booting, so there the charge need only cover the 40 MiB (measuring the wrong cgroup,
    // the channel bridge's few MiB, would not).
    let (code, _, err) = run(
        &client,
        &[
            "sh",
            "-c",
            "head -c 41943040 /dev/zero > /dev/shm/held && echo ok",
        ],
        BoxUser::User,
        Some(write_within),
    )
    .await;
    assert_eq!(code, 0, "writing 40 MiB to /dev/shm: {err}");
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

/// A snapshot keeps the whole running box: the same process counts on from where it was
/// (its count lived only in its memory), a file in RAM (`/dev/shm`) is still there, and
/// while snapshotted the box holds no memory (its VMM is gone) and its snapshot has a
/// size. The restore hands the box a new boot token (the old one opens nothing), its
/// egress works, and a cold start after another snapshot drops the snapshot.
pub async fn a_snapshot_keeps_processes_and_memory_and_a_restore_hands_over_a_new_token(
    fx: &Fixture,
) {
    assert!(fx.runtime.capabilities().snapshot);
    let spec = fx.spec(Limits::default());
    assert!(matches!(
        fx.runtime
            .restore(&common::next_boot(&spec), &spec.boot_token)
            .await,
        Err(RuntimeError::WrongState { .. })
    ));
    let client = fx.runtime.start(&spec).await.expect("start").client;
    run_ok(
        &client,
        &["sh", "-c", "echo only-in-ram > /dev/shm/note && echo ok"],
        BoxUser::User,
    )
    .await;
    common::start_counter(&client).await;
    let before = common::counted_past(&client, 2).await;

    let t0 = std::time::Instant::now();
    fx.runtime.snapshot(&spec.id).await.expect("snapshot");
    eprintln!("snapshot took {:?}", t0.elapsed());
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Stopped
    );
    assert_eq!(fx.runtime.memory_held(&spec.id).await.unwrap(), None);
    assert!(fx.runtime.list().await.unwrap().is_empty());
    let size = fx.runtime.snapshot_size(&spec.id).await.unwrap();
    let size = size.expect("a snapshotted box has a snapshot");
    eprintln!("snapshot size: {size} bytes");
    assert!(size > 0);

    let restored = common::next_boot(&spec);
    let t0 = std::time::Instant::now();
    let booted = fx
        .runtime
        .restore(&restored, &spec.boot_token)
        .await
        .expect("restore");
    eprintln!("restore took {:?}", t0.elapsed());
    let client = booted.client;
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Running
    );
    let after = common::counted_past(&client, before.1).await;
    assert_eq!(after.0, before.0, "the same process after the restore");
    assert_eq!(
        run_ok(&client, &["cat", "/dev/shm/note"], BoxUser::User)
            .await
            .trim(),
        "only-in-ram"
    );
    common::assert_old_token_refused(fx.runtime.as_ref(), &spec).await;
    assert_eq!(fx.runtime.snapshot_size(&spec.id).await.unwrap(), None);
    // The restored box's egress reaches the listener of its new boot.
    crate::egress::egress_round_trip(&client, &booted.egress, EGRESS_TLS_PORT, "restored").await;

    // A second snapshot, then a cold start: the snapshot is dropped and RAM is new.
    fx.runtime.snapshot(&spec.id).await.expect("snapshot again");
    let cold = common::next_boot(&restored);
    let client = fx.runtime.start(&cold).await.expect("cold start").client;
    assert_eq!(fx.runtime.snapshot_size(&spec.id).await.unwrap(), None);
    let (code, _, _) = common::run(&client, &["cat", "/dev/shm/note"], BoxUser::User, None).await;
    assert_ne!(code, 0, "a cold start has an empty /dev/shm");
    fx.runtime.stop(&spec.id, GRACE).await.unwrap();
}
