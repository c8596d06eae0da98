//! A full volume: the box keeps working.

use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_protocol::harness::HarnessConfig;
use berth_runtime::Limits;

use crate::common::{self, run, run_ok, Fixture};
use crate::GRACE;

use super::fixtures::deliver_and_see_echoed;

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
