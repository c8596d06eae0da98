//! Boxes see neither each other nor the host, and have no network but loopback.

use std::time::Duration;

use berth_protocol::guest::{BoxUser, FileQuery};
use berth_runtime::Limits;
use bytes::Bytes;

use crate::common::{self, run, run_ok, Backend, Fixture};

/// Two boxes see neither each other's processes nor files, nor the host's processes
/// or files. (What box root may do to its kernel is backend-specific: `host.rs` for the
/// sandbox; a VM's root owns its own guest kernel.)
pub async fn boxes_are_isolated_from_each_other_and_the_host(fx: &Fixture) {
    let a_spec = fx.spec(Limits::default());
    let b_spec = fx.spec(Limits::default());
    let a = fx.runtime.start(&a_spec).await.expect("start a").client;
    let b = fx.runtime.start(&b_spec).await.expect("start b").client;

    // A process sleeping in B, with a name A could look for.
    let b_bg = b.clone();
    let sleeper = tokio::spawn(async move {
        run(
            &b_bg,
            &["sleep", "1234"],
            BoxUser::User,
            Some(Duration::from_secs(120)),
        )
        .await
    });
    let all_args = "cat /proc/[0-9]*/cmdline | tr '\\0' ' '";
    common::wait_until_within(fx.patience(), || async {
        run_ok(&b, &["sh", "-c", all_args], BoxUser::Root)
            .await
            .contains("sleep 1234")
    })
    .await;
    let a_procs = run_ok(&a, &["sh", "-c", all_args], BoxUser::Root).await;
    assert!(
        !a_procs.contains("sleep 1234"),
        "box A sees B's process: {a_procs}"
    );
    // Nor this test's own process on the host.
    let me = std::fs::read(format!("/proc/{}/cmdline", std::process::id())).unwrap();
    let me = String::from_utf8_lossy(me.split(|&b| b == 0).next().unwrap()).into_owned();
    assert!(
        !a_procs.contains(&me),
        "box A sees the host's process {me}: {a_procs}"
    );
    if fx.backend() == Backend::Sandbox {
        // A VM's own kernel threads fill its /proc; a container's holds only the box.
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
    }

    let b_file = FileQuery {
        path: "/home/user/secret".into(),
        ..Default::default()
    };
    b.write_file(&b_file, Bytes::from_static(b"b only"))
        .await
        .unwrap();
    assert!(a.read_file(&b_file).await.is_err(), "box A reads B's file");
    let (code, _, _) = run(&a, &["cat", "/home/user/secret"], BoxUser::Root, None).await;
    assert_ne!(code, 0, "box root of A reads B's file");

    // A file on the host (in its /tmp, where a box's /tmp would show it if shared).
    let marker = format!("berth-host-marker-{}", a_spec.id.as_str());
    let host_file = std::env::temp_dir().join(&marker);
    std::fs::write(&host_file, "host only").unwrap();
    let found = run(&a, &["cat", &format!("/tmp/{marker}")], BoxUser::Root, None).await;
    let _ = std::fs::remove_file(&host_file);
    assert!(
        found.0 != 0 && !found.1.contains("host only"),
        "box A sees a host file: {found:?}"
    );
    sleeper.abort();
}

/// No network device but loopback, and loopback is up.
pub async fn only_loopback_exists(fx: &Fixture) {
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let devices = run_ok(&client, &["ls", "/sys/class/net"], BoxUser::User).await;
    assert_eq!(devices.split_whitespace().collect::<Vec<_>>(), ["lo"]);
    let flags = run_ok(&client, &["cat", "/sys/class/net/lo/flags"], BoxUser::User).await;
    let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
    assert_eq!(flags & 1, 1, "lo is down");
}
