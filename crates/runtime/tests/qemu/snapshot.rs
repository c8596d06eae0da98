//! What a snapshot of a VM needs from QEMU: nothing blocks a migration, and a snapshot
//! loads only into the launch it was saved from.

use super::*;

/// QEMU itself says a running qemu box can be migrated (a snapshot is a migration to a
/// file): no device of its setup blocks it. The guest channel was once vhost-user-vsock,
/// which every QEMU refuses to migrate; this fails if a device like it comes back.
#[tokio::test(flavor = "multi_thread")]
async fn qemu_finds_nothing_that_blocks_a_migration() {
    let Some(fx) = fixture("migratable").await else {
        return;
    };
    let rt = &fx.runtime;
    let spec = spec_with_memory(&fx.images, 256);
    rt.start(&spec).await.expect("start");
    let paths = rt.layout().box_paths(&spec.id);
    let mut qmp = berth_runtime::qemu::Qmp::connect(&paths.qmp_socket())
        .await
        .expect("QMP");
    let migrate = qmp.execute("query-migrate").await.expect("query-migrate");
    drop(qmp);
    let blocked = migrate.get("blocked-reasons");
    assert!(
        blocked.is_none_or(|b| b.as_array().is_some_and(|a| a.is_empty())),
        "QEMU would refuse to snapshot: {migrate}"
    );
    assert!(rt.capabilities().snapshot);
    rt.stop(&spec.id, GRACE).await.unwrap();
}

/// A snapshot loads only into the launch it was saved from: a box whose memory changed
/// since is refused with the difference (the daemon then boots it cold), the snapshot is
/// kept until that cold start drops it, and nothing of the refused restore runs on.
#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_of_another_launch_is_refused_and_a_cold_start_drops_it() {
    let Some(fx) = fixture("snapmismatch").await else {
        return;
    };
    let rt = &fx.runtime;
    let spec = spec_with_memory(&fx.images, 256);
    rt.start(&spec).await.expect("start");
    rt.snapshot(&spec.id).await.expect("snapshot");
    let paths = rt.layout().box_paths(&spec.id);
    let state = paths.box_dir().join("snapshot/state");
    let meta = std::fs::metadata(&state).expect("the snapshot's state file");
    assert_eq!(
        std::os::unix::fs::MetadataExt::uid(&meta),
        0,
        "the snapshot is root's, not the VMM's"
    );
    assert!(!paths.migration_socket().exists());

    let mut bigger = common::next_boot(&spec);
    bigger.limits.memory_mib = 384;
    match rt.restore(&bigger, &spec.boot_token).await {
        Err(e @ RuntimeError::SnapshotMismatch { .. }) => {
            let text = e.to_string();
            assert!(text.contains("384M") && text.contains("256M"), "{text}");
        }
        other => panic!("a snapshot of 256 MiB must not load into 384 MiB: {other:?}"),
    }
    assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Stopped);
    assert!(rt.snapshot_size(&spec.id).await.unwrap().is_some());
    let client = rt.start(&bigger).await.expect("cold start").client;
    assert_eq!(rt.snapshot_size(&spec.id).await.unwrap(), None);
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    rt.stop(&spec.id, GRACE).await.unwrap();
}
