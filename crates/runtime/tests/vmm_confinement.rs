//! The VMMs of the qemu backend run confined (issue 11, section 3): a guest's root owns its
//! own kernel, so QEMU and the channel bridge are the wall between a hostile box and the
//! host. Each runs as an unprivileged uid of its own box's id range with no capabilities,
//! `no_new_privs` and a seccomp filter (QEMU's own `-sandbox`), in a mount namespace that
//! holds only that box's files, and in the box's cgroup with its CPU quota, memory and
//! pids limits. Real QEMU guests (TCG here), two at once.
//!
//! Skips (`berth_testkit::skip`, part `qemu`) without QEMU, the channel bridge or the test images, like
//! tests/qemu.rs.

#[allow(dead_code, unused_imports)]
mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_protocol::guest::BoxUser;
use berth_runtime::qemu::{QemuConfig, QemuRuntime};
use berth_runtime::{BoxSpec, IdMap, Limits, Runtime, RuntimeStatus};
use common::images::{images, vm_binaries};
use common::run_ok;
use common::vm::{self, vm_spec};

const GRACE: Duration = Duration::from_secs(10);

type Fixture = vm::VmFixture<QemuRuntime>;

async fn fixture(name: &str) -> Option<Fixture> {
    if let Err(why) = vm_binaries() {
        berth_testkit::skip("qemu", format!("{name}: {why}"));
        return None;
    }
    let images = match tokio::task::spawn_blocking(images).await.unwrap() {
        Ok(images) => images,
        Err(why) => {
            berth_testkit::skip("qemu", format!("{name}: {why}"));
            return None;
        }
    };
    let slot = vm::vm_slot().await;
    let dir = tempfile::Builder::new()
        .prefix(&format!("berth-vmm-{name}-"))
        .tempdir()
        .unwrap();
    let config = QemuConfig::new(dir.path(), &images.kernel, &images.initramfs);
    match QemuRuntime::new(config).await {
        Ok(runtime) => Some(Fixture {
            runtime: Arc::new(runtime),
            images,
            dir,
            _slot: slot,
        }),
        Err(e @ berth_runtime::RuntimeError::Missing { .. }) => {
            berth_testkit::skip("qemu", format!("{name}: {e}"));
            None
        }
        Err(e) => panic!("QemuRuntime::new: {e}"),
    }
}

/// One field of `/proc/<pid>/status` (`Uid`, `Seccomp`, ...), without its name.
fn status_field(pid: i32, field: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in the status of {pid}"))
        .trim()
        .to_owned()
}

/// The VMM processes of a running box: (what, pid).
fn vmm_pids(rt: &QemuRuntime, spec: &BoxSpec) -> [(&'static str, i32); 2] {
    [
        ("QEMU", rt.qemu_pid(&spec.id).expect("QEMU runs")),
        (
            "the channel bridge",
            rt.bridge_pid(&spec.id).expect("the channel bridge runs"),
        ),
    ]
}

/// Each of the box's VMM processes: an unprivileged uid and gid of the box's own range (so
/// no other box's), no capability, `no_new_privs`, a seccomp filter. Returns the uid.
fn assert_unprivileged(rt: &QemuRuntime, spec: &BoxSpec) -> u32 {
    let range = spec.id_map.host_base..spec.id_map.host_base + IdMap::SIZE;
    let mut uids = Vec::new();
    for (what, pid) in vmm_pids(rt, spec) {
        for field in ["Uid", "Gid"] {
            let ids: Vec<u32> = status_field(pid, field)
                .split_whitespace()
                .map(|id| id.parse().unwrap())
                .collect();
            assert_eq!(ids.len(), 4, "{what} {field}: {ids:?}");
            assert!(
                ids.iter().all(|id| *id == ids[0] && range.contains(id)),
                "{what} (pid {pid}) {field}s {ids:?}: not all the box's own unprivileged id {range:?}"
            );
            uids.push(ids[0]);
        }
        assert_eq!(
            status_field(pid, "Groups"),
            "",
            "{what}: supplementary groups"
        );
        for caps in ["CapEff", "CapPrm", "CapInh", "CapAmb", "CapBnd"] {
            assert_eq!(
                status_field(pid, caps),
                "0000000000000000",
                "{what} (pid {pid}) {caps}"
            );
        }
        assert_eq!(status_field(pid, "NoNewPrivs"), "1", "{what} (pid {pid})");
        assert_eq!(
            status_field(pid, "Seccomp"),
            "2",
            "{what} (pid {pid}): no seccomp filter"
        );
    }
    uids[0]
}

/// The process's mount namespace is its own, and what it sees (its root, its mount
/// table) holds its box's files and the `shared` read-only files it runs on (QEMU: the
/// images, and the volume it serves; the channel bridge: its own binary and the sockets)
/// and none of `other`'s.
fn assert_sees_only_its_box(
    pid: i32,
    own: &BoxSpec,
    other: &BoxSpec,
    data_dir: &Path,
    shared: &[&Path],
    serves_volume: bool,
) {
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).unwrap();
    assert_ne!(
        ns(&pid.to_string()),
        ns("self"),
        "pid {pid} shares the host's mount namespace"
    );
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let inside = |path: &Path| root.join(path.strip_prefix("/").unwrap());
    let box_dir = |spec: &BoxSpec| data_dir.join("boxes").join(spec.id.as_str());
    // QEMU serves the volume; the channel bridge has only the sockets.
    assert_eq!(
        inside(&box_dir(own).join("volume.ext4")).exists(),
        serves_volume,
        "pid {pid}: its own volume"
    );
    assert!(
        inside(&box_dir(own).join("vm/run")).is_dir(),
        "pid {pid}: no sockets dir"
    );
    for hidden in [
        box_dir(other),
        box_dir(other).join("volume.ext4"),
        PathBuf::from("/etc/shadow"),
        PathBuf::from("/root"),
        PathBuf::from("/proc/1"),
        PathBuf::from("/sys/fs/cgroup"),
    ] {
        // A shared file outside /usr (the bridge's berth-init in a checkout under /root) is
        // bound at its own path: its ancestors exist, holding only the way to it.
        if let Some(file) = shared.iter().find(|f| f.starts_with(&hidden)) {
            let next = file
                .strip_prefix(&hidden)
                .unwrap()
                .components()
                .next()
                .unwrap();
            let listed: Vec<_> = std::fs::read_dir(inside(&hidden))
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(
                listed,
                [next.as_os_str()],
                "pid {pid} sees more of {} than the way to {}",
                hidden.display(),
                file.display()
            );
            continue;
        }
        assert!(
            !inside(&hidden).exists(),
            "pid {pid} can see {}",
            hidden.display()
        );
    }
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    assert!(
        !mounts.contains(other.id.as_str()),
        "pid {pid}'s mounts name the other box:\n{mounts}"
    );
    // Nothing of the host's but the read-only system files and the few devices QEMU needs.
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (point, options) = (fields[4], fields[5]);
        let allowed = point == "/"
            || point == "/usr"
            || point.starts_with("/dev/")
            || point.starts_with(box_dir(own).to_str().unwrap())
            || shared.iter().any(|image| Path::new(point) == *image);
        assert!(
            allowed,
            "pid {pid} has an unexpected mount {point}:\n{mounts}"
        );
        let writable = options.split(',').any(|o| o == "rw");
        if writable {
            assert!(
                point.starts_with(box_dir(own).to_str().unwrap()) || point.starts_with("/dev/"),
                "pid {pid}: {point} is writable:\n{mounts}"
            );
        }
    }
}

/// The cgroup of `pid` for `controller` (v1: the hierarchy holding it; v2: the unified one).
fn cgroup_dir(pid: i32, controller: &str) -> PathBuf {
    let table = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    for line in table.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
        if controllers.split(',').any(|c| c == controller) {
            let mount = std::fs::read_dir("/sys/fs/cgroup")
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .find(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.split(',').any(|c| c == controller))
                })
                .unwrap();
            return mount.join(path.trim_start_matches('/'));
        }
        if controllers.is_empty() && Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            return Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
        }
    }
    panic!("pid {pid} is in no {controller} cgroup:\n{table}");
}

fn read(path: PathBuf) -> String {
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .trim()
        .to_owned()
}

/// Both VMM processes are in the box's own cgroup, whose files hold the box's CPU quota
/// (a fractional vCPU as a quota of the period), a memory limit above the guest's RAM and a
/// pids limit. Returns the cgroup dirs.
fn assert_cgroup_limits(rt: &QemuRuntime, spec: &BoxSpec) -> Vec<PathBuf> {
    let [(_, qemu), (_, bridge)] = vmm_pids(rt, spec);
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let mut dirs = Vec::new();
    for controller in ["cpu", "memory", "pids"] {
        let dir = cgroup_dir(qemu, controller);
        assert_eq!(dir, cgroup_dir(bridge, controller), "{controller}");
        assert!(
            dir.to_string_lossy().contains(spec.id.as_str()),
            "QEMU's {controller} cgroup is not its box's: {}",
            dir.display()
        );
        dirs.push(dir);
    }
    let quota = (spec.limits.cpus * 100_000.0).round() as u64;
    let guest = spec.limits.memory_mib << 20;
    if v2 {
        assert_eq!(read(dirs[0].join("cpu.max")), format!("{quota} 100000"));
        let memory: u64 = read(dirs[1].join("memory.max")).parse().unwrap();
        assert!(memory > guest, "memory.max {memory} <= the guest's {guest}");
        read(dirs[2].join("pids.max")).parse::<u64>().unwrap();
    } else {
        assert_eq!(read(dirs[0].join("cpu.cfs_period_us")), "100000");
        assert_eq!(read(dirs[0].join("cpu.cfs_quota_us")), quota.to_string());
        let memory: u64 = read(dirs[1].join("memory.limit_in_bytes")).parse().unwrap();
        assert!(
            memory > guest && memory < u64::MAX >> 2,
            "memory limit {memory}"
        );
        read(dirs[2].join("pids.max")).parse::<u64>().unwrap();
    }
    dirs
}

/// The check, on two VMs at once: each VMM process is unprivileged, filtered and
/// sees only its own box; the cgroup holds the quota; the box still boots, execs, stops,
/// starts again, and a restarted backend finds and stops it; nothing stays behind.
#[tokio::test(flavor = "multi_thread")]
async fn each_vmm_runs_unprivileged_filtered_and_sees_only_its_own_box() {
    let Some(fx) = fixture("confined").await else {
        return;
    };
    let rt = &fx.runtime;
    let data_dir = fx.dir.path();
    let half = vm_spec(
        &fx.images,
        Limits {
            memory_mib: 192,
            cpus: 0.5,
            ..Limits::default()
        },
    );
    let other = vm_spec(
        &fx.images,
        Limits {
            memory_mib: 128,
            ..Limits::default()
        },
    );
    let a = rt.start(&half).await.expect("start a");
    let b = rt.start(&other).await.expect("start b");
    for (client, spec) in [(&a.client, &half), (&b.client, &other)] {
        assert_eq!(
            run_ok(client, &["echo", "ok"], BoxUser::User).await.trim(),
            "ok"
        );
        assert_eq!(rt.status(&spec.id).await.unwrap(), RuntimeStatus::Running);
    }
    let uid_a = assert_unprivileged(rt, &half);
    let uid_b = assert_unprivileged(rt, &other);
    assert_ne!(uid_a, uid_b, "two boxes' VMMs share a uid");
    for (own, theirs) in [(&half, &other), (&other, &half)] {
        for (what, pid) in vmm_pids(rt, own) {
            let images = &fx.images;
            let bridge = berth_runtime::init_binary().expect("berth-init");
            let qemu_files = [&*images.kernel, &*images.initramfs, &*images.rootfs];
            let bridge_files = [bridge.as_path()];
            let shared: &[&Path] = if what == "QEMU" {
                &qemu_files
            } else {
                &bridge_files
            };
            assert_sees_only_its_box(pid, own, theirs, data_dir, shared, what == "QEMU");
        }
    }
    let cgroups = assert_cgroup_limits(rt, &half);
    assert_cgroup_limits(rt, &other);

    // Stop and start again: the second boot is confined the same way.
    rt.stop(&half.id, GRACE).await.expect("stop");
    for dir in &cgroups {
        assert!(!dir.exists(), "{} outlived the stop", dir.display());
    }
    let again = common::next_boot(&half);
    let booted = rt.start(&again).await.expect("start again");
    assert_eq!(
        run_ok(&booted.client, &["echo", "again"], BoxUser::User)
            .await
            .trim(),
        "again"
    );
    assert_eq!(assert_unprivileged(rt, &again), uid_a);

    // A restarted backend (a restarted daemon) finds both, reaches them, stops them.
    let restarted = QemuRuntime::new(QemuConfig::new(
        data_dir,
        &fx.images.kernel,
        &fx.images.initramfs,
    ))
    .await
    .expect("a second backend");
    let mut listed = restarted.list().await.unwrap();
    listed.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    let mut want = vec![again.id.clone(), other.id.clone()];
    want.sort_by(|x, y| x.as_str().cmp(y.as_str()));
    assert_eq!(listed, want);
    let client = restarted.channel(&again.id, &again.boot_token);
    assert_eq!(
        run_ok(&client, &["echo", "back"], BoxUser::User)
            .await
            .trim(),
        "back"
    );
    for spec in [&again, &other] {
        restarted.stop(&spec.id, GRACE).await.expect("stop");
        for dir in common::cgroup_dirs(&spec.id) {
            assert!(!dir.exists(), "{} outlived the stop", dir.display());
        }
        // The volume is berth's again once nothing runs.
        use std::os::unix::fs::MetadataExt;
        let volume = data_dir
            .join("boxes")
            .join(spec.id.as_str())
            .join("volume.ext4");
        assert_eq!(
            std::fs::metadata(&volume).unwrap().uid(),
            0,
            "{}",
            volume.display()
        );
    }
    assert!(restarted.list().await.unwrap().is_empty());
}

/// Whether the box's cgroup is gone everywhere and its files are root's again.
fn assert_confinement_undone(data_dir: &Path, spec: &BoxSpec) {
    use std::os::unix::fs::MetadataExt;
    for dir in common::cgroup_dirs(&spec.id) {
        assert!(!dir.exists(), "{} outlived the boot", dir.display());
    }
    let box_dir = data_dir.join("boxes").join(spec.id.as_str());
    for file in [
        box_dir.join("volume.ext4"),
        box_dir.join("vm/console.log"),
        box_dir.join("vm/run"),
    ] {
        let meta = std::fs::metadata(&file).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{}", file.display());
    }
}

/// A start that fails (the boot deadline passes) and a VM whose QEMU is killed from outside
/// leave no cgroup behind and give the box's files back to root.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_start_and_a_killed_vm_undo_their_confinement() {
    let Some(fx) = fixture("undo").await else {
        return;
    };
    let data_dir = fx.dir.path();
    let mut config = QemuConfig::new(data_dir, &fx.images.kernel, &fx.images.initramfs);
    config.boot_deadline = Some(Duration::from_millis(300));
    config.accel = berth_runtime::qemu::AccelMode::Tcg;
    let hasty = QemuRuntime::new(config).await.expect("a backend");
    let spec = vm::spec_with_memory(&fx.images, 128);
    hasty
        .start(&spec)
        .await
        .expect_err("no guest boots in 300 ms under TCG");
    assert_confinement_undone(data_dir, &spec);

    let rt = &fx.runtime;
    let again = common::next_boot(&spec);
    rt.start(&again).await.expect("start");
    let qemu = rt.qemu_pid(&again.id).unwrap();
    // SAFETY: plain kill(2) of the VM's QEMU, a child of this process.
    assert_eq!(unsafe { libc::kill(qemu, libc::SIGKILL) }, 0);
    common::wait_until(|| async { rt.status(&again.id).await.unwrap() == RuntimeStatus::Stopped })
        .await;
    assert_confinement_undone(data_dir, &again);
}
