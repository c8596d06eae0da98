//! What a box keeps: its files across a restart, berth-init's state dir, read-only layers.

use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use berth_protocol::guest::BoxUser;
use berth_protocol::harness::HarnessConfig;
use berth_runtime::{GuestClient, Layer, Limits, RuntimeError};
use bytes::Bytes;

use crate::common::{self, run, run_ok, Backend, Fixture};
use crate::GRACE;

/// Files go in and out through the channel and survive a stop and start; the old boot
/// token dies with its boot.
pub async fn files_persist_across_restart_and_old_token_is_refused(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let home = common::file("/home/user/a.txt");
    let memory = common::file("/memory/x");
    client
        .write_file(&home, Bytes::from_static(b"hello"))
        .await
        .expect("write home");
    client
        .write_file(&memory, Bytes::from_static(b"remember"))
        .await
        .expect("write memory");
    assert_eq!(&client.read_file(&home).await.unwrap()[..], b"hello");
    let listing = client
        .list_files(&common::file("/home/user"))
        .await
        .unwrap();
    assert!(listing.entries.iter().any(|e| e.name == "a.txt"));
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");

    let again = common::next_boot(&spec);
    let client2 = fx.runtime.start(&again).await.expect("restart").client;
    assert_eq!(&client2.read_file(&home).await.unwrap()[..], b"hello");
    assert_eq!(&client2.read_file(&memory).await.unwrap()[..], b"remember");
    let memory_dir = client2.list_files(&common::file("/memory")).await.unwrap();
    for name in ["README.md", "entities", "comms", "timeline", "workstreams"] {
        assert!(
            memory_dir.entries.iter().any(|e| e.name == name),
            "/memory lacks {name}"
        );
    }
    common::assert_old_token_refused(fx.runtime.as_ref(), &spec).await;
    fx.runtime.stop(&spec.id, GRACE).await.unwrap();
}

/// A shared layer is visible read-only at its target (even box root cannot write it or
/// remount it), its files readable and runnable by the user; a layer berth would refuse
/// starts nothing. The sandbox bind-mounts the host dir read-only; qemu copies it into an
/// ext4 image attached as a read-only disk, so guest root may unmount it (that hides the
/// layer, it cannot change it) and the check leaves that step to the sandbox.
pub async fn layers_are_read_only_for_box_root_and_readable_by_the_user(fx: &Fixture) {
    let layer = common::layer_dir(&[
        ("data.txt", "from the layer\n", 0o644),
        ("bin/hello", "#!/bin/sh\necho hello from the layer\n", 0o755),
        ("open.txt", "anyone may write this file\n", 0o666),
    ]);
    // World-writable on the host: only the read-only mount stops box root and the user.
    std::fs::set_permissions(layer.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // A VM mounts a layer on a directory its read-only rootfs image already has (the
    // minimal image has /mnt); the sandbox creates its mount points.
    let target = match fx.backend() {
        Backend::Sandbox => "/opt/test-layer",
        Backend::Qemu => "/mnt",
    };
    let mut spec = fx.spec(Limits::default());
    spec.layers = vec![Layer {
        source: layer.path().to_path_buf(),
        target: target.into(),
    }];
    let t0 = Instant::now();
    let client = fx
        .runtime
        .start(&spec)
        .await
        .expect("start with a layer")
        .client;
    eprintln!("start with a layer to ready: {:?}", t0.elapsed());
    assert_eq!(layer_data(&client, target).await, "from the layer\n");
    assert_eq!(
        run_ok(&client, &[&format!("{target}/bin/hello")], BoxUser::User).await,
        "hello from the layer\n"
    );
    let mut attempts = vec![
        ("create a file", format!("touch {target}/new")),
        ("overwrite a file", format!("echo x > {target}/open.txt")),
        ("remove a file", format!("rm -f {target}/data.txt")),
        (
            "remount it read-write",
            format!("mount -o remount,rw {target} && touch {target}/new"),
        ),
    ];
    if fx.backend() == Backend::Sandbox {
        attempts.push(("unmount it", format!("umount -l {target}")));
    }
    for (what, script) in attempts {
        let (code, _, _) = run(&client, &["sh", "-c", &script], BoxUser::Root, None).await;
        assert_ne!(code, 0, "box root could {what} in a layer");
    }
    let (code, _, _) = run(
        &client,
        &["sh", "-c", &format!("echo x > {target}/open.txt")],
        BoxUser::User,
        None,
    )
    .await;
    assert_ne!(code, 0, "the user could write in a layer");
    // Still the layer's content after every attempt.
    assert_eq!(layer_data(&client, target).await, "from the layer\n");
    for (file, content) in [
        ("data.txt", "from the layer\n"),
        ("open.txt", "anyone may write this file\n"),
    ] {
        assert_eq!(
            std::fs::read_to_string(layer.path().join(file)).unwrap(),
            content
        );
    }
    assert!(!layer.path().join("new").exists());
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");

    for (source, target) in [
        (layer.path().to_path_buf(), "/proc/x"),
        (layer.path().to_path_buf(), "/home/user/x"),
        (layer.path().to_path_buf(), "relative"),
        (layer.path().join("missing"), "/opt/x"),
        (layer.path().join("data.txt"), "/opt/x"),
    ] {
        let mut bad = fx.spec(Limits::default());
        bad.layers = vec![Layer {
            source: source.clone(),
            target: target.into(),
        }];
        match fx.runtime.start(&bad).await {
            Err(RuntimeError::InvalidSpec { .. }) => {}
            other => panic!("layer {source:?} -> {target:?}: want InvalidSpec, got {other:?}"),
        }
        assert!(!fx.runtime.list().await.unwrap().contains(&bad.id));
        assert!(fx.box_processes(&bad).is_empty());
    }
}

/// berth-init's state dir is on the volume at /var/lib/berth: root-only, not executable,
/// kept across stop and start. The harness config is in /run/berth, out of the user's reach.
pub async fn agent_state_dir_is_root_only_and_persists_and_harness_config_is_private(fx: &Fixture) {
    let mut spec = fx.spec(Limits::default());
    // A harness that only waits: the test must not depend on what berth-init does with it.
    let harness: HarnessConfig =
        serde_json::from_value(serde_json::json!({"command": ["/bin/cat"], "ack": "write"}))
            .unwrap();
    spec.harness = Some(harness.clone());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    for (what, argv) in [
        ("list /var/lib/berth", "ls /var/lib/berth"),
        ("write in /var/lib/berth", "touch /var/lib/berth/x"),
        ("read the harness config", "cat /run/berth/harness.json"),
    ] {
        let (code, _, _) = run(&client, &["sh", "-c", argv], BoxUser::User, None).await;
        assert_ne!(code, 0, "the user could {what}");
    }
    assert_eq!(
        run_ok(
            &client,
            &["stat", "-c", "%a %u", "/var/lib/berth"],
            BoxUser::Root
        )
        .await
        .trim(),
        "700 0"
    );
    run_ok(
        &client,
        &["sh", "-c", "echo kept > /var/lib/berth/conformance-probe"],
        BoxUser::Root,
    )
    .await;
    // A script, not a copied binary: busybox run under another name fails on its own,
    // which would pass this check for the wrong reason. The same script runs from /tmp.
    let script = |dir: &str| {
        format!(
            "printf '#!/bin/sh\\nexit 0\\n' > {dir}/conformance-true && \
             chmod 755 {dir}/conformance-true && {dir}/conformance-true"
        )
    };
    run_ok(&client, &["sh", "-c", &script("/tmp")], BoxUser::Root).await;
    let (code, _, _) = run(
        &client,
        &["sh", "-c", &script("/var/lib/berth")],
        BoxUser::Root,
        None,
    )
    .await;
    assert_ne!(code, 0, "box root could run a program from /var/lib/berth");
    let config = run_ok(&client, &["cat", "/run/berth/harness.json"], BoxUser::Root).await;
    let config: HarnessConfig = serde_json::from_str(&config).expect("harness.json is JSON");
    assert_eq!(config, harness);
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");

    let mut again = common::next_boot(&spec);
    again.harness = None;
    let client = fx.runtime.start(&again).await.expect("restart").client;
    assert_eq!(
        run_ok(
            &client,
            &["cat", "/var/lib/berth/conformance-probe"],
            BoxUser::Root
        )
        .await,
        "kept\n"
    );
    let (code, _, _) = run(
        &client,
        &["test", "-e", "/run/berth/harness.json"],
        BoxUser::Root,
        None,
    )
    .await;
    assert_ne!(
        code, 0,
        "a box without a harness still has a harness config"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// The layer's `data.txt` as the box user reads it.
async fn layer_data(client: &GuestClient, target: &str) -> String {
    run_ok(
        client,
        &["cat", &format!("{target}/data.txt")],
        BoxUser::User,
    )
    .await
}
