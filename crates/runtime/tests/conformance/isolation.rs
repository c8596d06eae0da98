//! Boxes see neither each other nor the host, and have no network but loopback.

use std::time::Duration;

use berth_protocol::guest::{BoxUser, FileQuery};
use berth_runtime::{GuestClient, Limits};
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

/// What the kernel-surface probe asks, in C (the `minimal` image has no Python): one line
/// per call, `<name> <errno>`, 0 when the call succeeded.
const PROBE_C: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void report(const char *name, long rc) { printf("%s %d\n", name, rc < 0 ? errno : 0); }

/* A listener on 127.0.0.1 and a connection to it: loopback TCP works end to end. */
static long tcp_loopback(void) {
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof addr;
    int server = socket(AF_INET, SOCK_STREAM, 0), client = socket(AF_INET, SOCK_STREAM, 0);
    if (server < 0 || client < 0) return -1;
    if (bind(server, (struct sockaddr *)&addr, len) || listen(server, 1)) return -1;
    if (getsockname(server, (struct sockaddr *)&addr, &len)) return -1;
    return connect(client, (struct sockaddr *)&addr, len);
}

/* A fork bomb that never lets go: every process forks on and on, and where the kernel
   refuses, waits and tries again (a shell would exit instead). The box stays full either
   way; a retry a second, not ten, keeps a TCG guest's one CPU from spending itself on
   refused forks (each copies the process before the limit refuses it), which made each of
   the host's calls take half a minute there. */
static int fork_bomb(void) {
    for (;;) {
        if (fork() < 0) sleep(1);
    }
}

/* Memory hogs: `count` children, each touching `kib` KiB and waiting to be killed. Nothing
   is exec'd, so a full box has no programs of its own to re-read from its page cache (a
   shell's hogs running dd and tr kept an image-rootfs box thrashing for minutes before its
   OOM killer acted). */
static int memory_hogs(int count, int kib) {
    for (int i = 0; i < count; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            /* volatile: a compiler may drop a malloc'd block that is never read */
            volatile char *p = malloc((size_t)kib * 1024);
            for (size_t at = 0; p && at < (size_t)kib * 1024; at += 4096) p[at] = 1;
            for (;;) pause();
        }
        if (pid < 0) usleep(10000);
    }
    while (wait(NULL) > 0) {}
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "fork-bomb") == 0) return fork_bomb();
    if (argc > 3 && strcmp(argv[1], "memory-hogs") == 0)
        return memory_hogs(atoi(argv[2]), atoi(argv[3]));
    char params[256] = {0};
    int pair[2];
    report("io_uring_setup", syscall(SYS_io_uring_setup, 1, params));
    report("io_uring_enter", syscall(SYS_io_uring_enter, -1, 0, 0, 0, NULL, 0));
    report("io_uring_register", syscall(SYS_io_uring_register, -1, 0, NULL, 0));
    report("socket_vsock", socket(40 /* AF_VSOCK */, SOCK_STREAM, 0));
    report("socket_packet", socket(AF_PACKET, SOCK_DGRAM, 0));
    report("socket_netlink", socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */));
    report("socket_alg", socket(38 /* AF_ALG */, SOCK_SEQPACKET, 0));
    /* The kernel reads the family as an int: garbage in the upper half must not help. */
    report("socket_vsock_high_bits", syscall(SYS_socket, 0x100000000L | 40, SOCK_STREAM, 0));
    report("socketpair_netlink", socketpair(AF_NETLINK, SOCK_RAW, 0, pair));
    report("bpf", syscall(SYS_bpf, 0, NULL, 0));
    report("userfaultfd", syscall(SYS_userfaultfd, 0));
    report("perf_event_open", syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0));
    report("keyctl", syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0));
    report("add_key", syscall(SYS_add_key, "user", "berth", "x", 1, -3));
    report("request_key", syscall(SYS_request_key, "user", "berth", NULL, 0));
    report("socket_unix", socket(AF_UNIX, SOCK_STREAM, 0));
    report("socket_inet", socket(AF_INET, SOCK_DGRAM, 0));
    report("socket_inet6", socket(AF_INET6, SOCK_STREAM, 0));
    report("socketpair_unix", socketpair(AF_UNIX, SOCK_STREAM, 0, pair));
    report("tcp_loopback", tcp_loopback());
    return 0;
}
"#;

/// The probe, compiled statically once per test binary (it runs on any rootfs), in a
/// directory to bind into boxes as a layer; `Err` is why the check skips.
fn kernel_probe() -> Result<&'static std::path::Path, String> {
    static PROBE: std::sync::OnceLock<Result<std::path::PathBuf, String>> =
        std::sync::OnceLock::new();
    PROBE
        .get_or_init(build_probe)
        .as_deref()
        .map_err(Clone::clone)
}

/// Compiles the probe once per version of its source, into the test images' cache
/// (`$BERTH_TEST_IMAGE_DIR`, default `/var/tmp/berth-test-images`), so no test process
/// leaves a build of its own behind; made in a temp dir and renamed into place, so
/// concurrent tests never see half a probe.
fn build_probe() -> Result<std::path::PathBuf, String> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    PROBE_C.hash(&mut hasher);
    let cache = berth_testkit::image_cache::dir();
    let dir = cache.join(format!("probe-{:016x}", hasher.finish()));
    if dir.join("probe").exists() {
        return Ok(dir);
    }
    std::fs::create_dir_all(&cache).map_err(|e| format!("cannot make {cache:?}: {e}"))?;
    let tmp = tempfile::Builder::new()
        .prefix(".probe-")
        .tempdir_in(&cache)
        .map_err(|e| format!("cannot make a temp dir in {cache:?}: {e}"))?;
    let source = tmp.path().join("probe.c");
    std::fs::write(&source, PROBE_C).map_err(|e| format!("cannot write {source:?}: {e}"))?;
    let out = std::process::Command::new("cc")
        .args(["-static", "-Os", "-s", "-o"])
        .arg(tmp.path().join("probe"))
        .arg(&source)
        .output()
        .map_err(|e| format!("no C compiler to build the probe (cc: {e})"))?;
    if !out.status.success() {
        return Err(format!(
            "cc -static failed (libc6-dev installs the static libc): {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot open up {:?}: {e}", tmp.path()))?;
    // Another test may have put the same probe in place first: theirs is as good.
    let built = tmp.keep();
    if std::fs::rename(&built, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&built);
    }
    Ok(dir)
}

/// Binds the probe into `spec`'s box as a layer; the probe's path in the box, or `None`
/// after saying why `test` skips.
pub fn add_probe(fx: &Fixture, spec: &mut berth_runtime::BoxSpec, test: &str) -> Option<String> {
    let dir = match kernel_probe() {
        Ok(dir) => dir.to_path_buf(),
        Err(why) => {
            berth_testkit::skip("cc", format!("{test}: {why}"));
            return None;
        }
    };
    // On a read-only rootfs image a layer goes on a directory the image has.
    let target = if fx.rootfs_is_image() {
        "/mnt"
    } else {
        "/opt/berth-probe"
    };
    spec.layers = vec![berth_runtime::Layer {
        source: dir,
        target: target.into(),
    }];
    Some(format!("{target}/probe"))
}

/// The box user's kernel surface is small: no io_uring (`ENOSYS`, so liburing users fall
/// back), no socket family but `AF_UNIX`, `AF_INET` and `AF_INET6` (`EAFNOSUPPORT`: no
/// `AF_VSOCK` to the host's egress port, no `AF_PACKET`, no netlink, no module loading by
/// family), no bpf, userfaultfd, perf events or keyrings (`EPERM`); the families it keeps
/// work, loopback TCP included.
pub async fn box_user_kernel_surface_is_small(fx: &Fixture) {
    let mut spec = fx.spec(Limits::default());
    let Some(probe) = add_probe(fx, &mut spec, "box_user_kernel_surface_is_small") else {
        return;
    };
    let client = fx.runtime.start(&spec).await.expect("start").client;
    let out = run_ok(&client, &[&probe], BoxUser::User).await;
    let errno: std::collections::BTreeMap<&str, i32> = out
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(name, e)| (name, e.trim().parse().unwrap()))
        .collect();
    let refused = [
        ("io_uring_setup", libc::ENOSYS),
        ("io_uring_enter", libc::ENOSYS),
        ("io_uring_register", libc::ENOSYS),
        ("socket_vsock", libc::EAFNOSUPPORT),
        ("socket_packet", libc::EAFNOSUPPORT),
        ("socket_netlink", libc::EAFNOSUPPORT),
        ("socket_alg", libc::EAFNOSUPPORT),
        ("socket_vsock_high_bits", libc::EAFNOSUPPORT),
        ("socketpair_netlink", libc::EAFNOSUPPORT),
        ("bpf", libc::EPERM),
        ("userfaultfd", libc::EPERM),
        ("perf_event_open", libc::EPERM),
        ("keyctl", libc::EPERM),
        ("add_key", libc::EPERM),
        ("request_key", libc::EPERM),
    ];
    let allowed = [
        "socket_unix",
        "socket_inet",
        "socket_inet6",
        "socketpair_unix",
        "tcp_loopback",
    ];
    let wrong: Vec<String> = refused
        .iter()
        .filter(|(name, want)| errno.get(name) != Some(want))
        .map(|(name, want)| format!("{name}: errno {:?}, want {want}", errno.get(name)))
        .chain(
            allowed
                .iter()
                .filter(|name| errno.get(*name) != Some(&0))
                .map(|name| format!("{name}: errno {:?}, want success", errno.get(name))),
        )
        .collect();
    assert!(
        wrong.is_empty(),
        "the box user's kernel surface: {wrong:#?}\n{out}"
    );
    if !fx.is_vm() {
        // A container shares the host's kernel: box root gets neither io_uring nor vsock
        // (not network-namespaced) from the bundle's filter either.
        let out = run_ok(&client, &[&probe], BoxUser::Root).await;
        let root: std::collections::BTreeMap<&str, i32> = out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(name, e)| (name, e.trim().parse().unwrap()))
            .collect();
        for (name, want) in [
            ("io_uring_setup", libc::ENOSYS),
            ("socket_vsock", libc::EAFNOSUPPORT),
            ("socket_vsock_high_bits", libc::EAFNOSUPPORT),
        ] {
            assert_eq!(root.get(name), Some(&want), "box root's {name}:\n{out}");
        }
    }
    everyday_tools_still_work(&client).await;
    fx.runtime.stop(&spec.id, crate::GRACE).await.expect("stop");
}

/// Where the box has them (the host rootfs; the `minimal` image has busybox only): Python's
/// sockets and `getaddrinfo` (whose netlink query is refused: glibc then assumes both IP
/// families), and curl's connection to the egress proxy.
async fn everyday_tools_still_work(client: &GuestClient) {
    let python = "import socket\n\
        socket.getaddrinfo('localhost', 80, flags=socket.AI_ADDRCONFIG)\n\
        server = socket.create_server(('127.0.0.1', 0))\n\
        client = socket.create_connection(server.getsockname())\n\
        a, b = socket.socketpair()\n\
        socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n\
        print('ok')";
    let has = |program: &'static str| async move {
        run(client, &["test", "-x", program], BoxUser::User, None)
            .await
            .0
            == 0
    };
    if has("/usr/bin/python3").await {
        let out = run_ok(client, &["python3", "-c", python], BoxUser::User).await;
        assert_eq!(out.trim(), "ok");
    } else {
        berth_testkit::skip("box-tools", "the box has no python3 to try sockets with");
    }
    if has("/usr/bin/curl").await {
        // The test's egress channel has nobody behind it: the proxy takes the connection
        // and the request waits; what matters is that curl reached it.
        let (_, _, err) = run(
            client,
            &[
                "curl",
                "-sv",
                "--max-time",
                "3",
                "https://api.example.test/",
            ],
            BoxUser::User,
            None,
        )
        .await;
        assert!(
            err.contains("Connected to 127.0.0.1") && err.contains("port 3128"),
            "curl did not reach the egress proxy: {err}"
        );
    } else {
        berth_testkit::skip(
            "box-tools",
            "the box has no curl to try the egress proxy with",
        );
    }
}
