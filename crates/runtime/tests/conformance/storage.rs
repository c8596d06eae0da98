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
    // On a read-only rootfs image a layer goes on a directory the image already has (the
    // minimal image has /mnt); the sandbox's host rootfs gets its mount points made.
    let target = if fx.rootfs_is_image() {
        "/mnt"
    } else {
        "/opt/test-layer"
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

/// The volume the box sees is its `disk_mib` (as `df` in the box reports it: the image
/// less ext4's own metadata), and a larger `disk_mib` at the next start grows it with the
/// files kept.
pub async fn volume_is_disk_mib_and_grows_at_the_next_start(fx: &Fixture) {
    let mut spec = fx.spec(Limits::default());
    spec.disk_mib = 96;
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let small = df_mib(&client).await;
    assert!(
        (96 * 85 / 100..=96).contains(&small),
        "df says {small} MiB for a 96 MiB volume"
    );
    run_ok(
        &client,
        &["sh", "-c", "echo kept > /home/user/kept"],
        BoxUser::User,
    )
    .await;
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");

    let mut again = common::next_boot(&spec);
    again.disk_mib = 192;
    let client = fx
        .runtime
        .start(&again)
        .await
        .expect("restart larger")
        .client;
    let large = df_mib(&client).await;
    assert!(
        (192 * 85 / 100..=192).contains(&large),
        "df says {large} MiB for a 192 MiB volume"
    );
    assert_eq!(
        run_ok(&client, &["cat", "/home/user/kept"], BoxUser::User).await,
        "kept\n"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// `df -k /home/user` in the box: the volume's size in MiB. (As root: busybox's df stats
/// the mount's root, which is a root-only place in a VM.)
async fn df_mib(client: &GuestClient) -> u64 {
    let out = run_ok(client, &["df", "-k", "/home/user"], BoxUser::Root).await;
    let line = out
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("df said {out:?}"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("df said {out:?}"));
    kib / 1024
}

/// What the box user and box root made on the volume (files, a directory, a symlink, odd
/// modes, `/memory`, berth-init's state dir) keeps its owner and mode across a stop and
/// start, as the box sees them.
pub async fn files_keep_owners_and_modes_across_stop_and_start(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    run_ok(
        &client,
        &[
            "sh",
            "-c",
            "cd /home/user && echo u > mine && chmod 600 mine && mkdir -m 750 dir \
             && echo x > dir/run && chmod 4755 dir/run && ln -s mine link \
             && echo m > /memory/note && chmod 640 /memory/note",
        ],
        BoxUser::User,
    )
    .await;
    run_ok(
        &client,
        &[
            "sh",
            "-c",
            "echo r > /home/user/roots && chmod 604 /home/user/roots \
             && echo j > /var/lib/berth/probe && chmod 600 /var/lib/berth/probe",
        ],
        BoxUser::Root,
    )
    .await;
    let stat = "stat -c '%n %u %g %a %F' /home/user/mine /home/user/dir /home/user/dir/run \
                /home/user/link /home/user/roots /memory/note /var/lib/berth/probe";
    let before = run_ok(&client, &["sh", "-c", stat], BoxUser::Root).await;
    for expected in [
        "/home/user/mine 1001 1001 600 regular file",
        "/home/user/dir 1001 1001 750 directory",
        // The volume is nosuid, not its files: the bit stays, it only does nothing.
        "/home/user/dir/run 1001 1001 4755 regular file",
        "/home/user/link 1001 1001 777 symbolic link",
        "/home/user/roots 0 0 604 regular file",
        "/memory/note 1001 1001 640 regular file",
        "/var/lib/berth/probe 0 0 600 regular file",
    ] {
        assert!(before.contains(expected), "want {expected:?} in\n{before}");
    }
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");

    let again = common::next_boot(&spec);
    let client = fx.runtime.start(&again).await.expect("restart").client;
    let after = run_ok(&client, &["sh", "-c", stat], BoxUser::Root).await;
    assert_eq!(after, before);
    assert_eq!(
        run_ok(&client, &["cat", "/home/user/link"], BoxUser::User).await,
        "u\n"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}

/// Sandbox: the volume is loop-mounted only while the box runs; stop leaves no mount and
/// no loop device; and what a killed daemon left (the mount of a box that died with it) is
/// released by the next runtime on the data dir, while a box that still runs keeps its
/// volume.
pub async fn volume_is_released_at_stop_and_after_a_daemon_crash(fx: &Fixture) {
    let sandbox = fx.sandbox().expect("a sandbox check");
    let spec = fx.spec(Limits::default());
    fx.runtime.start(&spec).await.expect("start");
    assert!(sandbox.volume_mounted(&spec.id));
    assert_eq!(sandbox.volume_loop_devices(&spec.id).len(), 1);
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    assert!(!sandbox.volume_mounted(&spec.id));
    assert_eq!(sandbox.volume_loop_devices(&spec.id), Vec::<u32>::new());

    // Two boxes up; the daemon dies; one box dies with it (SIGKILL to its init, its
    // container left for the next daemon), the other lives on.
    let dies = common::next_boot(&spec);
    let lives = fx.spec(Limits::default());
    fx.runtime.start(&dies).await.expect("start");
    let client = fx.runtime.start(&lives).await.expect("start").client;
    let pid = sandbox.init_pid(&dies.id).await.unwrap().expect("a pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let map = dies.id_map;
    common::wait_until_within(fx.patience(), || async move {
        common::host_pids_in_range(map).is_empty()
    })
    .await;
    assert!(sandbox.volume_mounted(&dies.id), "nothing released it yet");

    let restarted = berth_runtime::sandbox::SandboxRuntime::new(sandbox.config().clone())
        .expect("a new runtime on the same data dir");
    assert!(!restarted.volume_mounted(&dies.id));
    assert_eq!(restarted.volume_loop_devices(&dies.id), Vec::<u32>::new());
    assert!(restarted.volume_mounted(&lives.id));
    assert_eq!(
        run_ok(
            &client,
            &["sh", "-c", "echo ok > /home/user/f && cat /home/user/f"],
            BoxUser::User
        )
        .await,
        "ok\n"
    );
    // The box that died starts again on its volume.
    let back = common::next_boot(&dies);
    fx.runtime
        .start(&back)
        .await
        .expect("start after the crash");
    for id in [&dies.id, &lives.id] {
        fx.runtime.stop(id, GRACE).await.expect("stop");
        assert!(!sandbox.volume_mounted(id));
        assert_eq!(sandbox.volume_loop_devices(id), Vec::<u32>::new());
    }
}

/// Sandbox: a running box's volume grows online (the box sees the new size at once, its
/// files kept); it never shrinks, and a stopped box's volume waits for its next start.
pub async fn volume_grows_online_while_the_box_runs(fx: &Fixture) {
    let sandbox = fx.sandbox().expect("a sandbox check");
    let mut spec = fx.spec(Limits::default());
    spec.disk_mib = 96;
    let client = fx.runtime.start(&spec).await.expect("start").client;
    run_ok(
        &client,
        &["sh", "-c", "echo kept > /home/user/kept"],
        BoxUser::User,
    )
    .await;
    if !has_cap_sys_resource() {
        // ext4's online resize needs it; the offline growth at the next start does not.
        let err = sandbox
            .grow_volume_online(&spec.id, 192)
            .await
            .expect_err("no online resize without CAP_SYS_RESOURCE");
        fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
        // The failed attempt left the image at its file system's size: it grows offline.
        let image = fx.box_dir(&spec.id).join("volume.ext4");
        assert_eq!(std::fs::metadata(&image).unwrap().len(), 96 << 20);
        berth_testkit::skip(
            "cap-sys-resource",
            format!(
                "online growth: this host's root lacks CAP_SYS_RESOURCE ({})",
                berth_runtime::error_chain(&err)
            ),
        );
        return;
    }
    sandbox
        .grow_volume_online(&spec.id, 192)
        .await
        .expect("grow online");
    let large = df_mib(&client).await;
    assert!(
        (192 * 85 / 100..=192).contains(&large),
        "df says {large} MiB after growing to 192 MiB"
    );
    assert_eq!(
        run_ok(&client, &["cat", "/home/user/kept"], BoxUser::User).await,
        "kept\n"
    );
    let err = sandbox
        .grow_volume_online(&spec.id, 96)
        .await
        .expect_err("a volume never shrinks");
    assert!(
        berth_runtime::error_chain(&err).contains("cannot shrink"),
        "{err}"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    let err = sandbox
        .grow_volume_online(&spec.id, 256)
        .await
        .expect_err("a stopped box's volume is not mounted");
    assert!(
        berth_runtime::error_chain(&err).contains("next start"),
        "{err}"
    );
}

/// Whether this process holds CAP_SYS_RESOURCE (bit 24 of `CapEff`).
fn has_cap_sys_resource() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
            u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
        })
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

/// Sandbox: a box from before volume images (a directory volume owned by its host ids)
/// starts on an image made from it, and sees every file as it did: content, mode, owner,
/// links; berth-init's state too.
pub async fn a_directory_volume_is_migrated_at_the_next_start(fx: &Fixture) {
    use std::os::unix::fs::{chown, lchown};
    let sandbox = fx.sandbox().expect("a sandbox check");
    let spec = fx.spec(Limits::default());
    let paths = sandbox.layout().box_paths(&spec.id);
    let old = paths.legacy_volume_dir();
    let (root, user) = (spec.id_map.host_id(0), spec.id_map.host_id(1001));
    for (rel, content, mode, owner) in [
        ("home", None, 0o700, user),
        ("memory", None, 0o755, user),
        ("agent", None, 0o700, root),
        ("home/notes", Some("mine\n"), 0o640, user),
        ("home/by-root", Some("root's\n"), 0o604, root),
        ("home/empty", None, 0o750, user),
        ("memory/README.md", Some("# Memory\n"), 0o644, user),
        ("agent/journal", Some("seq 7\n"), 0o600, root),
    ] {
        let path = old.join(rel);
        match content {
            Some(c) => std::fs::write(&path, c).unwrap(),
            None => std::fs::create_dir_all(&path).unwrap(),
        }
        chown(&path, Some(owner), Some(owner)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::os::unix::fs::symlink("notes", old.join("home/link")).unwrap();
    lchown(old.join("home/link"), Some(user), Some(user)).unwrap();
    std::fs::hard_link(old.join("home/notes"), old.join("home/hard")).unwrap();

    let client = fx.runtime.start(&spec).await.expect("start").client;
    assert!(!old.exists(), "the directory volume is gone once migrated");
    let stat = run_ok(
        &client,
        &[
            "sh",
            "-c",
            "cd /home/user && stat -c '%n %u:%g %a %F %h' notes by-root empty link hard \
             /memory/README.md /var/lib/berth/journal && readlink link && cat hard by-root \
             /var/lib/berth/journal",
        ],
        BoxUser::Root,
    )
    .await;
    assert_eq!(
        stat,
        "notes 1001:1001 640 regular file 2\n\
         by-root 0:0 604 regular file 1\n\
         empty 1001:1001 750 directory 2\n\
         link 1001:1001 777 symbolic link 1\n\
         hard 1001:1001 640 regular file 2\n\
         /memory/README.md 1001:1001 644 regular file 1\n\
         /var/lib/berth/journal 0:0 600 regular file 1\n\
         notes\nmine\nroot's\nseq 7\n"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}
