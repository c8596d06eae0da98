//! Sandbox-only checks: a container shares the host's kernel, so box root must hold no
//! power over it, and the host must not follow links box root plants in the run dir. A VM
//! has its own kernel (guest root may mount, load modules) and its channel is a host-side
//! socket the guest cannot reach, so neither check has a VM counterpart.

use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_runtime::{IdMap, Limits};

use crate::common::{self, run, run_ok, Fixture};

/// Box root cannot mount, load modules, write kernel controls or cgroups, write the
/// rootfs or make a user namespace; it holds no kernel-reaching capability and is the
/// box's own host uid.
pub async fn box_root_holds_no_power_over_the_host_kernel(fx: &Fixture) {
    let sandbox = fx.sandbox().expect("a sandbox-only check");
    let spec = fx.spec(Limits::default());
    let a = fx.runtime.start(&spec).await.expect("start").client;
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
            &spec.id_map.host_base.to_string(),
            &IdMap::SIZE.to_string()
        ]
    );
    let pid = sandbox
        .init_pid(&spec.id)
        .await
        .unwrap()
        .expect("the box runs");
    assert_eq!(
        common::host_uid_of(pid),
        Some(spec.id_map.host_base),
        "box root must be the range's base on the host"
    );
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
pub async fn host_does_not_follow_a_planted_socket_link(fx: &Fixture) {
    fx.sandbox().expect("a sandbox-only check");
    let spec = fx.spec(Limits::default());
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
