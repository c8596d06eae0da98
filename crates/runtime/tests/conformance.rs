//! The conformance suite: what every `Runtime` backend must do, written against
//! `&dyn Runtime` so qemu and firecracker run the same checks. Instantiated here for the
//! `sandbox` backend (runc), each test with its own data dir and a guard that kills and
//! deletes everything the test started, even when it panics.
//!
//! Needs root, an OCI runtime and a built berth-init (`make init`); otherwise every test
//! prints `SKIPPED: <reason>` and returns.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use berth_protocol::guest::{BoxUser, FileQuery};
use berth_protocol::harness::HarnessConfig;
use berth_protocol::BoxId;
use berth_runtime::{EgressSetup, IdMap, Layer, Limits, RuntimeError, RuntimeStatus};
use bytes::Bytes;
use common::{fixture, new_spec, run, run_ok};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GRACE: Duration = Duration::from_secs(5);

/// 1. The box boots, its agent answers, users and PID 1 are what they must be.
#[tokio::test(flavor = "multi_thread")]
async fn boots_and_answers_as_user_1001_with_berth_init_as_pid_1() {
    let Some(fx) = fixture("boots") else { return };
    let spec = new_spec(Limits::default());
    let t0 = Instant::now();
    let client = fx.runtime.start(&spec).await.expect("start").client;
    eprintln!("start to ready: {:?}", t0.elapsed());
    client.info().await.expect("info");
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Running
    );
    assert_eq!(
        run_ok(&client, &["id", "-u"], BoxUser::User).await.trim(),
        "1001"
    );
    assert_eq!(
        run_ok(&client, &["id", "-u"], BoxUser::Root).await.trim(),
        "0"
    );
    assert_eq!(
        run_ok(&client, &["cat", "/proc/1/comm"], BoxUser::User)
            .await
            .trim(),
        "berth-init"
    );
    for file in ["/proc/1/environ", "/proc/1/mem"] {
        let (code, _, _) = run(&client, &["head", "-c", "1", file], BoxUser::User, None).await;
        assert_ne!(code, 0, "user could read {file}");
    }
    // Programs need a world-writable, sticky /tmp (runc takes a tmpfs's mode from the
    // directory it covers, not from its options).
    assert_eq!(
        run_ok(
            &client,
            &["sh", "-c", "stat -c %a /tmp && touch /tmp/x && echo ok"],
            BoxUser::User
        )
        .await
        .split_whitespace()
        .collect::<Vec<_>>(),
        ["1777", "ok"]
    );
    assert!(fx.runtime.list().await.unwrap().contains(&spec.id));
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Stopped
    );
}

/// 2. Files go in and out through the channel and survive a stop and start; the old boot
/// token dies with its boot.
#[tokio::test(flavor = "multi_thread")]
async fn files_persist_across_restart_and_old_token_is_refused() {
    let Some(fx) = fixture("persist") else { return };
    let spec = new_spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let home = FileQuery {
        path: "/home/user/a.txt".into(),
        ..Default::default()
    };
    let memory = FileQuery {
        path: "/memory/x".into(),
        ..Default::default()
    };
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
        .list_files(&FileQuery {
            path: "/home/user".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(listing.entries.iter().any(|e| e.name == "a.txt"));
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");

    let mut again = spec.clone();
    again.boot_token = common::token();
    let client2 = fx.runtime.start(&again).await.expect("restart").client;
    assert_eq!(&client2.read_file(&home).await.unwrap()[..], b"hello");
    assert_eq!(&client2.read_file(&memory).await.unwrap()[..], b"remember");
    let memory_dir = client2
        .list_files(&FileQuery {
            path: "/memory".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    for name in ["README.md", "entities", "comms", "timeline", "workstreams"] {
        assert!(
            memory_dir.entries.iter().any(|e| e.name == name),
            "/memory lacks {name}"
        );
    }
    let old = fx.runtime.channel(&spec.id, &spec.boot_token);
    match old.info().await {
        Err(berth_runtime::GuestError::Remote { status: 401, .. }) => {}
        other => panic!("the old token must get 401, got {other:?}"),
    }
    fx.runtime.stop(&spec.id, GRACE).await.unwrap();
}

/// 3. Boxes see neither each other nor the host's kernel controls.
#[tokio::test(flavor = "multi_thread")]
async fn boxes_are_isolated_from_each_other_and_the_host() {
    let Some(fx) = fixture("isolation") else {
        return;
    };
    let a_spec = new_spec(Limits::default());
    let b_spec = new_spec(Limits::default());
    let a = fx.runtime.start(&a_spec).await.expect("start a").client;
    let b = fx.runtime.start(&b_spec).await.expect("start b").client;

    // A process sleeping in B, with a name A could look for.
    let b_bg = b.clone();
    let sleeper = tokio::spawn(async move {
        run(
            &b_bg,
            &["sleep", "1234"],
            BoxUser::User,
            Some(Duration::from_secs(30)),
        )
        .await
    });
    common::wait_until(|| async {
        run_ok(
            &b,
            &[
                "sh",
                "-c",
                "ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline",
            ],
            BoxUser::Root,
        )
        .await
        .contains("1234")
    })
    .await;
    let a_procs = run_ok(
        &a,
        &["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"],
        BoxUser::Root,
    )
    .await;
    assert!(
        !a_procs.contains("sleep 1234"),
        "box A sees B's process: {a_procs}"
    );
    let a_pids = run_ok(
        &a,
        &["sh", "-c", "ls /proc | grep -c '^[0-9]'"],
        BoxUser::Root,
    )
    .await;
    assert!(
        a_pids.trim().parse::<u32>().unwrap() < 20,
        "box A sees too many pids: {a_pids}"
    );

    let b_file = FileQuery {
        path: "/home/user/secret".into(),
        ..Default::default()
    };
    b.write_file(&b_file, Bytes::from_static(b"b only"))
        .await
        .unwrap();
    assert!(a.read_file(&b_file).await.is_err(), "box A reads B's file");

    for (what, argv) in [
        ("mount proc", "mount -t proc proc /mnt 2>&1 || mount -t proc proc /tmp"),
        ("mount tmpfs", "mount -t tmpfs tmpfs /tmp"),
        ("load a module", "modprobe dummy 2>&1 || insmod /nonexistent.ko"),
        ("write /proc/sys", "echo 1 > /proc/sys/kernel/sysrq"),
        (
            "write a cgroup",
            "for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do echo $$ > $f && exit 0; done; exit 1",
        ),
        ("load a module", "echo /tmp/x > /proc/sys/kernel/modprobe"),
        ("write /usr", "touch /usr/berth-test"),
        ("write /", "touch /berth-test"),
        ("unshare a user namespace", "unshare -U true"),
    ] {
        let (code, _, _) = run(&a, &["sh", "-c", argv], BoxUser::Root, None).await;
        assert_ne!(code, 0, "box root could {what}");
    }
    // Box root holds no capability that reaches the kernel; the user holds none at all.
    let root_caps =
        capability_sets(&run_ok(&a, &["cat", "/proc/self/status"], BoxUser::Root).await);
    for (bit, name) in [
        (21, "CAP_SYS_ADMIN"),
        (16, "CAP_SYS_MODULE"),
        (12, "CAP_NET_ADMIN"),
        (19, "CAP_SYS_PTRACE"),
        (27, "CAP_MKNOD"),
    ] {
        assert_eq!(
            root_caps["CapBnd"] & (1 << bit),
            0,
            "box root's bounding set has {name}"
        );
    }
    let user_caps =
        capability_sets(&run_ok(&a, &["cat", "/proc/self/status"], BoxUser::User).await);
    for set in ["CapEff", "CapPrm", "CapAmb"] {
        assert_eq!(user_caps[set], 0, "the user has capabilities in {set}");
    }

    let uid_map = run_ok(&a, &["cat", "/proc/self/uid_map"], BoxUser::Root).await;
    let fields: Vec<&str> = uid_map.split_whitespace().collect();
    assert_eq!(
        fields,
        [
            "0",
            &a_spec.id_map.host_base.to_string(),
            &IdMap::SIZE.to_string()
        ]
    );
    let pid = fx
        .sandbox
        .init_pid(&a_spec.id)
        .await
        .unwrap()
        .expect("a runs");
    assert_eq!(
        common::host_uid_of(pid),
        Some(a_spec.id_map.host_base),
        "box root must be the range's base on the host"
    );
    drop(sleeper);
}

fn capability_sets(status: &str) -> std::collections::HashMap<String, u64> {
    status
        .lines()
        .filter(|l| l.starts_with("Cap"))
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            Some((name.to_owned(), u64::from_str_radix(value.trim(), 16).ok()?))
        })
        .collect()
}

/// The host never follows a link that box root plants where the agent socket goes.
#[tokio::test(flavor = "multi_thread")]
async fn host_does_not_follow_a_planted_socket_link() {
    let Some(fx) = fixture("symlink") else { return };
    let spec = new_spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    // A host socket the box must not be able to point the host at.
    let decoy_dir = tempfile::tempdir().unwrap();
    let decoy = decoy_dir.path().join("decoy.sock");
    let listener = std::os::unix::net::UnixListener::bind(&decoy).unwrap();
    listener.set_nonblocking(true).unwrap();
    let script = format!(
        "rm -f /run/berth/agent.sock && ln -s {} /run/berth/agent.sock",
        decoy.display()
    );
    let (code, _, err) = run(&client, &["sh", "-c", &script], BoxUser::Root, None).await;
    assert_eq!(code, 0, "box root could not replace its own socket: {err}");
    let old = fx.runtime.channel(&spec.id, &spec.boot_token);
    let _ = tokio::time::timeout(Duration::from_secs(2), old.info()).await;
    assert!(
        listener.accept().is_err(),
        "the host connected through the box's link"
    );
}

/// 4. No network device but loopback, and loopback is up.
#[tokio::test(flavor = "multi_thread")]
async fn only_loopback_exists() {
    let Some(fx) = fixture("net") else { return };
    let spec = new_spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let devices = run_ok(&client, &["ls", "/sys/class/net"], BoxUser::User).await;
    assert_eq!(devices.split_whitespace().collect::<Vec<_>>(), ["lo"]);
    let flags = run_ok(&client, &["cat", "/sys/class/net/lo/flags"], BoxUser::User).await;
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
    assert_eq!(flags & 1, 1, "lo is down");
}

/// 5. A fork bomb hits the pids limit and the box survives it.
#[tokio::test(flavor = "multi_thread")]
async fn fork_bomb_is_contained() {
    let Some(fx) = fixture("forkbomb") else {
        return;
    };
    let spec = new_spec(Limits {
        pids: 64,
        ..Limits::default()
    });
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let bomb = "b() { b | b & }; b";
    let t0 = Instant::now();
    let _ = tokio::time::timeout(
        Duration::from_secs(20),
        run(
            &client,
            &["bash", "-c", bomb],
            BoxUser::User,
            Some(Duration::from_secs(3)),
        ),
    )
    .await;
    eprintln!("fork bomb ended after {:?}", t0.elapsed());
    common::wait_until(|| async {
        tokio::time::timeout(
            Duration::from_secs(2),
            run(&client, &["echo", "ok"], BoxUser::User, None),
        )
        .await
        .is_ok_and(|(code, out, _)| code == 0 && out.trim() == "ok")
    })
    .await;
    fx.runtime
        .stop(&spec.id, GRACE)
        .await
        .expect("stop after a fork bomb");
}

/// 6. A memory hog is killed by the box's memory limit, not the box.
#[tokio::test(flavor = "multi_thread")]
async fn memory_hog_is_killed_and_the_box_survives() {
    let Some(fx) = fixture("memory") else { return };
    let spec = new_spec(Limits {
        memory_mib: 64,
        ..Limits::default()
    });
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let (code, _, _) = run(
        &client,
        &["dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1"],
        BoxUser::User,
        Some(Duration::from_secs(20)),
    )
    .await;
    assert_ne!(code, 0, "a 200 MiB buffer fit in a 64 MiB box");
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
}

/// 7. After stop nothing of the box is left: processes, runtime state, cgroup, socket.
#[tokio::test(flavor = "multi_thread")]
async fn stop_leaves_nothing_behind() {
    let Some(fx) = fixture("stop") else { return };
    let spec = new_spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    // Something that ignores SIGTERM, in the background.
    let bg = client.clone();
    let _stubborn = tokio::spawn(async move {
        run(
            &bg,
            &["sh", "-c", "trap '' TERM; sleep 1000"],
            BoxUser::User,
            None,
        )
        .await
    });
    common::wait_until(|| async { !common::host_pids_in_range(spec.id_map).is_empty() }).await;
    fx.runtime
        .stop(&spec.id, Duration::from_millis(500))
        .await
        .expect("stop");
    let left = common::host_pids_in_range(spec.id_map);
    let detail: Vec<String> = left
        .iter()
        .map(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .unwrap_or_default()
                .lines()
                .take(8)
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .collect();
    assert!(
        left.is_empty(),
        "processes left in the box's id range: {detail:?}"
    );
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Stopped
    );
    assert!(!fx.runtime.list().await.unwrap().contains(&spec.id));
    for cgroup in common::cgroup_dirs(&spec.id) {
        assert!(!cgroup.exists(), "cgroup left: {}", cgroup.display());
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(spec.id.as_str()), "mount left for the box");
    assert!(
        !fx.sandbox
            .layout()
            .box_paths(&spec.id)
            .agent_socket()
            .exists(),
        "socket left"
    );
    // Stopping again, and stopping an unknown box, are fine.
    fx.runtime.stop(&spec.id, GRACE).await.expect("second stop");
    fx.runtime
        .stop(&BoxId::from_random([9; 20]), GRACE)
        .await
        .expect("unknown stop");
    fx.runtime.remove(&spec.id).await.expect("remove");
    assert!(!fx.sandbox.layout().box_paths(&spec.id).dir().exists());
}

/// 8. A paused box answers nothing until resumed.
#[tokio::test(flavor = "multi_thread")]
async fn pause_freezes_until_resume() {
    let Some(fx) = fixture("pause") else { return };
    if !fx.runtime.capabilities().pause {
        eprintln!("SKIPPED: {} cannot pause", fx.runtime.name());
        return;
    }
    let spec = new_spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    assert!(matches!(
        fx.runtime.resume(&spec.id).await,
        Err(berth_runtime::RuntimeError::WrongState { .. })
    ));
    fx.runtime.pause(&spec.id).await.expect("pause");
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Paused
    );
    assert!(matches!(
        fx.runtime.pause(&spec.id).await,
        Err(berth_runtime::RuntimeError::WrongState { .. })
    ));
    let frozen = tokio::time::timeout(
        Duration::from_millis(500),
        run(&client, &["echo", "ok"], BoxUser::User, None),
    )
    .await;
    assert!(frozen.is_err(), "a paused box answered");
    fx.runtime.resume(&spec.id).await.expect("resume");
    assert_eq!(
        fx.runtime.status(&spec.id).await.unwrap(),
        RuntimeStatus::Running
    );
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    // Stopping a paused box works too.
    fx.runtime.pause(&spec.id).await.unwrap();
    fx.runtime
        .stop(&spec.id, GRACE)
        .await
        .expect("stop a paused box");
    assert!(common::host_pids_in_range(spec.id_map).is_empty());
}

/// A box whose berth-init exits on its own (shutdown) reads as stopped and starts again.
#[tokio::test(flavor = "multi_thread")]
async fn box_that_shut_itself_down_is_stopped_and_restarts() {
    let Some(fx) = fixture("shutdown") else {
        return;
    };
    let spec = new_spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    client.shutdown().await.expect("shutdown");
    common::wait_until(|| async {
        fx.runtime.status(&spec.id).await.unwrap() == RuntimeStatus::Stopped
    })
    .await;
    assert!(!fx.runtime.list().await.unwrap().contains(&spec.id));
    let mut again = spec.clone();
    again.boot_token = common::token();
    let client = fx
        .runtime
        .start(&again)
        .await
        .expect("start after shutdown")
        .client;
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
    // Starting a running box is a state error, not a second box.
    assert!(matches!(
        fx.runtime.start(&again).await,
        Err(berth_runtime::RuntimeError::WrongState { .. })
    ));
    assert_eq!(
        run_ok(&client, &["echo", "ok"], BoxUser::User).await.trim(),
        "ok"
    );
}

/// Starting must not leave anything behind when berth-init cannot come up.
#[tokio::test(flavor = "multi_thread")]
async fn failed_start_leaves_nothing_running() {
    let Some(fx) = fixture("badstart") else {
        return;
    };
    let mut spec = new_spec(Limits::default());
    spec.hostname = "x".repeat(100); // longer than a UTS name may be
    let err = fx
        .runtime
        .start(&spec)
        .await
        .expect_err("a 100-char hostname must fail");
    eprintln!("expected failure: {err}");
    assert!(fx.runtime.list().await.unwrap().is_empty());
    assert!(common::host_pids_in_range(spec.id_map).is_empty());
}

/// A shared layer is visible read-only at its target (even box root cannot write it or
/// remount it), its files readable and runnable by the user; a layer berth would refuse
/// starts nothing.
#[tokio::test(flavor = "multi_thread")]
async fn layers_are_read_only_for_box_root_and_readable_by_the_user() {
    let Some(fx) = fixture("layers") else { return };
    let layer = common::layer_dir(&[
        ("data.txt", "from the layer\n", 0o644),
        ("bin/hello", "#!/bin/sh\necho hello from the layer\n", 0o755),
        ("open.txt", "anyone may write this file\n", 0o666),
    ]);
    // World-writable on the host: only the read-only mount stops box root and the user.
    std::fs::set_permissions(layer.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let mut spec = new_spec(Limits::default());
    spec.layers = vec![Layer {
        source: layer.path().to_path_buf(),
        target: "/opt/test-layer".into(),
    }];
    let t0 = Instant::now();
    let client = fx
        .runtime
        .start(&spec)
        .await
        .expect("start with a layer")
        .client;
    eprintln!("start with a layer to ready: {:?}", t0.elapsed());
    assert_eq!(
        run_ok(&client, &["cat", "/opt/test-layer/data.txt"], BoxUser::User).await,
        "from the layer\n"
    );
    assert_eq!(
        run_ok(&client, &["/opt/test-layer/bin/hello"], BoxUser::User).await,
        "hello from the layer\n"
    );
    for (what, script) in [
        ("create a file", "touch /opt/test-layer/new"),
        ("overwrite a file", "echo x > /opt/test-layer/open.txt"),
        ("remove a file", "rm -f /opt/test-layer/data.txt"),
        (
            "remount it read-write",
            "mount -o remount,rw /opt/test-layer && touch /opt/test-layer/new",
        ),
        ("unmount it", "umount -l /opt/test-layer"),
    ] {
        let (code, _, _) = run(&client, &["sh", "-c", script], BoxUser::Root, None).await;
        assert_ne!(code, 0, "box root could {what} in a layer");
    }
    let (code, _, _) = run(
        &client,
        &["sh", "-c", "echo x > /opt/test-layer/open.txt"],
        BoxUser::User,
        None,
    )
    .await;
    assert_ne!(code, 0, "the user could write in a layer");
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
        let mut bad = new_spec(Limits::default());
        bad.layers = vec![Layer {
            source: source.clone(),
            target: target.into(),
        }];
        match fx.runtime.start(&bad).await {
            Err(RuntimeError::InvalidSpec { .. }) => {}
            other => panic!("layer {source:?} -> {target:?}: want InvalidSpec, got {other:?}"),
        }
        assert!(!fx.runtime.list().await.unwrap().contains(&bad.id));
    }
}

/// berth-init's state dir is on the volume at /var/lib/berth: root-only, not executable,
/// kept across stop and start. The harness config is in /run/berth, out of the user's reach.
#[tokio::test(flavor = "multi_thread")]
async fn agent_state_dir_is_root_only_and_persists_and_harness_config_is_private() {
    let Some(fx) = fixture("agentstate") else {
        return;
    };
    let mut spec = new_spec(Limits::default());
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
    let (code, _, _) = run(
        &client,
        &[
            "sh",
            "-c",
            "cp /bin/true /var/lib/berth/conformance-true && /var/lib/berth/conformance-true",
        ],
        BoxUser::Root,
        None,
    )
    .await;
    assert_ne!(code, 0, "box root could run a program from /var/lib/berth");
    let config = run_ok(&client, &["cat", "/run/berth/harness.json"], BoxUser::Root).await;
    let config: HarnessConfig = serde_json::from_str(&config).expect("harness.json is JSON");
    assert_eq!(config, harness);
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");

    let mut again = spec.clone();
    again.boot_token = common::token();
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

/// 14. The egress channel: 443 and 3128 on the box's loopback reach the listener `start`
/// returns (one stream per connection, bytes unchanged both ways); nothing else listens;
/// `/etc/hosts` pins the allowed names and the trust bundle carries the box's CA, both
/// read-only; the box's env reaches its processes and its file is gone once read.
#[tokio::test(flavor = "multi_thread")]
async fn egress_leaves_only_through_the_channel() {
    let Some(fx) = fixture("egress") else { return };
    let mut spec = new_spec(Limits::default());
    let ca = "-----BEGIN CERTIFICATE-----\nQkVSVEgtVEVTVC1DQQ==\n-----END CERTIFICATE-----\n";
    spec.egress = EgressSetup {
        pinned_hosts: vec!["api.example.test".into()],
        ca_pem: Some(ca.into()),
    };
    spec.env = [(
        "ANTHROPIC_API_KEY".to_owned(),
        "berth-ph-conformance".to_owned(),
    )]
    .into();
    let booted = fx.runtime.start(&spec).await.expect("start");
    let (client, egress) = (booted.client, booted.egress);

    let hosts = run_ok(
        &client,
        &["getent", "hosts", "api.example.test"],
        BoxUser::User,
    )
    .await;
    assert_eq!(
        hosts.split_whitespace().next(),
        Some("127.0.0.1"),
        "{hosts}"
    );
    let bundle = run_ok(
        &client,
        &["cat", berth_protocol::guest::BOX_CA_BUNDLE],
        BoxUser::User,
    )
    .await;
    assert!(
        bundle.ends_with(ca),
        "the box CA is not in the trust bundle"
    );
    for user in [BoxUser::User, BoxUser::Root] {
        for file in ["/etc/hosts", berth_protocol::guest::BOX_CA_BUNDLE] {
            let (code, _, _) = run(
                &client,
                &["sh", "-c", &format!("echo 10.0.0.1 evil >> {file}")],
                user,
                None,
            )
            .await;
            assert_ne!(code, 0, "{user:?} could write {file}");
        }
    }

    let env = run_ok(&client, &["env"], BoxUser::User).await;
    assert!(
        env.contains("ANTHROPIC_API_KEY=berth-ph-conformance\n"),
        "{env}"
    );
    assert!(env.contains("HTTPS_PROXY=http://127.0.0.1:3128\n"), "{env}");
    let paths = fx.sandbox.layout().box_paths(&spec.id);
    assert!(!paths.env_file().exists(), "env.json outlived the boot");

    // Each port: the box writes a line, the host side answers, the box reads the answer.
    for port in [
        berth_protocol::guest::EGRESS_TLS_PORT,
        berth_protocol::guest::EGRESS_PROXY_PORT,
    ] {
        let script = format!(
            "exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'ping {port}\\n' >&3 && head -n1 <&3"
        );
        let box_side = {
            let client = client.clone();
            tokio::spawn(async move {
                run(
                    &client,
                    &["bash", "-c", &script],
                    BoxUser::User,
                    Some(Duration::from_secs(20)),
                )
                .await
            })
        };
        let (mut stream, _) = tokio::time::timeout(Duration::from_secs(20), egress.accept())
            .await
            .expect("no stream reached the egress listener")
            .expect("accept");
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        while !line.ends_with(b"\n") {
            let n = stream.read(&mut byte).await.unwrap();
            assert_eq!(n, 1, "the stream ended early: {line:?}");
            line.push(byte[0]);
        }
        assert_eq!(line, format!("ping {port}\n").as_bytes());
        stream
            .write_all(format!("pong {port}\n").as_bytes())
            .await
            .unwrap();
        let (code, out, err) = box_side.await.unwrap();
        assert_eq!(
            (code, out.trim()),
            (0, format!("pong {port}").as_str()),
            "{err}"
        );
    }

    for port in [80, 22, 8080] {
        let (code, _, _) = run(
            &client,
            &["bash", "-c", &format!("exec 3<>/dev/tcp/127.0.0.1/{port}")],
            BoxUser::User,
            Some(Duration::from_secs(20)),
        )
        .await;
        assert_ne!(code, 0, "something listens on port {port}");
    }

    // A new listener for a running box (the daemon restarted) gets the box's next stream.
    drop(egress);
    let egress = fx
        .runtime
        .rebind_egress(&spec.id, spec.id_map)
        .await
        .expect("rebind");
    let box_side = {
        let client = client.clone();
        tokio::spawn(async move {
            run(
                &client,
                &[
                    "bash",
                    "-c",
                    "exec 3<>/dev/tcp/127.0.0.1/443 && printf again >&3",
                ],
                BoxUser::User,
                Some(Duration::from_secs(20)),
            )
            .await
        })
    };
    let (mut stream, _) = tokio::time::timeout(Duration::from_secs(20), egress.accept())
        .await
        .expect("no stream after rebind")
        .expect("accept");
    let mut got = Vec::new();
    stream.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"again");
    assert_eq!(box_side.await.unwrap().0, 0);
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
}
