//! The backend under a stand-in jailer: a script that checks its arguments and the staged
//! chroot, does to the chroot what the real jailer does that berth can see (copies the
//! exec file in, chowns the chroot root), then execs the fake Firecracker with the
//! arguments after `--`. It does not chroot or drop privileges: the real jailer's own
//! behaviour is not verified here (no jailer or KVM on this machine). Needs root (chown,
//! bind mounts).

use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use super::fake::{FakeApi, FakeGuest};
use super::jail_clean::mounts_below;
use super::runtime_tests::{fake_runtime, spec, Cleanup};
use super::*;
use crate::RuntimeError;
use crate::{Runtime, RuntimeStatus};

const FAKE_JAILER: &str = r#"#!/bin/sh
set -eu
[ "$1" = --id ] && id=$2 && shift 2
[ "$1" = --exec-file ] && exec_file=$2 && shift 2
[ "$1" = --uid ] && uid=$2 && shift 2
[ "$1" = --gid ] && gid=$2 && shift 2
[ "$1" = --chroot-base-dir ] && base=$2 && shift 2
[ "$1" = --cgroup-version ] && shift 2
[ "$1" = -- ] && shift
chroot="$base/$(basename "$exec_file")/$id/root"
for f in vmlinux initrd.img rootfs.img volume.ext4 config.img; do
    [ -f "$chroot/$f" ] || { echo "jailer: no $f in $chroot" >&2; exit 3; }
done
cp "$exec_file" "$chroot/"
chown "$uid:$gid" "$chroot"
exec "$exec_file" --id="$id" "$@"
"#;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// [`fake_runtime`] under the fake jailer, its chroot base in `jail_base`, with a kernel
/// and initramfs to stage.
fn jailed_runtime(dir: &Path, jail_base: &Path) -> (FirecrackerRuntime, PathBuf) {
    let (mut runtime, rootfs) = fake_runtime(dir);
    let jailer_bin = dir.join("jailer");
    std::fs::write(&jailer_bin, FAKE_JAILER).unwrap();
    crate::fs::set_mode(&jailer_bin, 0o755).unwrap();
    for file in [
        &runtime.vmm.config.kernel,
        &runtime.vmm.config.initramfs,
        &rootfs,
    ] {
        std::fs::write(file, [1u8; 4096]).unwrap();
        crate::fs::set_mode(file, 0o644).unwrap();
    }
    runtime.vmm.config.jailer = Some(JailerConfig {
        jailer_bin,
        chroot_base_dir: jail_base.to_path_buf(),
        cgroup_version: 2,
    });
    (runtime, rootfs)
}

fn jailer(runtime: &FirecrackerRuntime) -> &JailerConfig {
    runtime.vmm.config.jailer.as_ref().unwrap()
}

fn mounts(dir: &Path) -> Vec<PathBuf> {
    mounts_below(
        &std::fs::read_to_string("/proc/self/mountinfo").unwrap(),
        dir,
    )
}

/// `<chroot>` + an absolute in-chroot path.
fn in_chroot(chroot: &Path, inside: &Path) -> PathBuf {
    chroot.join(inside.strip_prefix("/").unwrap())
}

fn owner_mode(path: &Path) -> (u32, u32, u32) {
    let meta = std::fs::metadata(path).unwrap();
    (meta.uid(), meta.gid(), meta.mode() & 0o7777)
}

fn same_inode(a: &Path, b: &Path) -> bool {
    let (a, b) = (std::fs::metadata(a).unwrap(), std::fs::metadata(b).unwrap());
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

/// Nothing of a jailed boot is left: no jail dir, no mount, no process, the volume berth's.
fn assert_nothing_left(runtime: &FirecrackerRuntime, id: &BoxId, pid: Option<i32>) {
    let jail_dir = jailer(runtime).jail_dir(&runtime.vmm.config.firecracker_bin, id);
    assert!(mounts(&jail_dir).is_empty(), "{:?}", mounts(&jail_dir));
    assert!(!jail_dir.exists(), "{} left", jail_dir.display());
    if let Some(pid) = pid {
        assert!(!crate::process::pid_alive(pid), "the VMM outlived it");
    }
    let paths = runtime.files(id);
    for file in paths.boot_files() {
        assert!(!file.exists(), "{} left", file.display());
    }
    let volume = paths.vm().volume();
    if volume.exists() {
        assert_eq!(owner_mode(&volume).0, 0, "the volume stays the jailer's");
    }
}

/// Spawns the stand-ins for when the "VMM" runs: the fake API (failing `fault` if given)
/// and guest. Their task yields what was mounted below the jail dir at that moment.
fn stand_ins(
    runtime: &FirecrackerRuntime,
    id: &BoxId,
    fault: Option<&'static str>,
) -> tokio::task::JoinHandle<(FakeApi, FakeGuest, Vec<PathBuf>)> {
    let paths = runtime.files(id);
    let jail_dir = jailer(runtime).jail_dir(&runtime.vmm.config.firecracker_bin, id);
    let (api_socket, vsock, pid_file) =
        (paths.api_socket(), paths.vsock_socket(), paths.pid_file());
    let console = paths.vm().console_log();
    tokio::spawn(async move {
        // The pid file exists before the pid is in it (it is written after it is created):
        // wait for the pid, not the file (under load the read fell in between).
        let started = Instant::now();
        let pid = loop {
            if let Some(pid) = crate::process::vmm::read_pid(&pid_file) {
                break pid;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no pid in {}",
                pid_file.display()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // The real API socket appears only once Firecracker runs: wait for the jailer's
        // exec (`--id=` is what it passes Firecracker).
        while !std::fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap_or_default()
            .windows(5)
            .any(|w| w == b"--id=")
        {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the jailer never exec'd"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let staged = mounts(&jail_dir);
        let api = FakeApi::serve_booting_with(&api_socket, &console, |api| {
            if let Some(path) = fault {
                api.fail(
                    path,
                    400,
                    r#"{"fault_message": "Unable to open the backing file"}"#,
                );
            }
        });
        (api, FakeGuest::serve_at(&vsock), staged)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jailed_boot_stages_its_files_answers_stops_and_leaves_nothing() {
    if !is_root() {
        berth_testkit::skip("root", "staging for the jailer needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The chroot on the data dir's file system: images are hard-linked.
    let (runtime, rootfs) = jailed_runtime(dir.path(), &dir.path().join("jail"));
    let _cleanup = Cleanup(&runtime);
    let spec = spec(&rootfs);
    let id = &spec.id;
    let paths = runtime.files(id);
    let chroot = jailer(&runtime).chroot(&runtime.vmm.config.firecracker_bin, id);
    // The box's own VMM ids, no other box's.
    let (uid, gid) = crate::vm::vmm_owner(spec.id_map);

    let stand_ins = stand_ins(&runtime, id, None);
    let booted = match runtime.start(&spec).await {
        Ok(booted) => booted,
        Err(RuntimeError::Missing { what, .. }) if what.contains("mkfs") => {
            berth_testkit::skip("e2fsprogs", format!("no mkfs for the volume ({what})"));
            return;
        }
        Err(e) => panic!("{}", crate::error_chain(&e)),
    };
    let (api, _guest, _) = stand_ins.await.unwrap();
    api.power_off_to(&paths.vm().console_log());

    // Firecracker was given only in-chroot paths; the sockets keep their host path.
    let seen = api.requests();
    assert_eq!(
        seen[1].body,
        Some(json!({
            "kernel_image_path": "/vmlinux",
            "initrd_path": "/initrd.img",
            "boot_args": BOOT_ARGS,
        }))
    );
    let drives: Vec<&str> = seen[2..5]
        .iter()
        .map(|r| r.body.as_ref().unwrap()["path_on_host"].as_str().unwrap())
        .collect();
    assert_eq!(drives, ["/rootfs.img", "/volume.ext4", "/config.img"]);
    let vsock = paths.vsock_socket();
    assert!(vsock.starts_with(paths.vm().vm_dir().join("run")));
    assert_eq!(
        seen[5].body,
        Some(json!({"guest_cid": 3, "uds_path": vsock.display().to_string()}))
    );

    // The jailer ran with the chroot staged, and exec'd Firecracker with its id.
    assert_eq!(owner_mode(&chroot).0, uid);
    assert!(chroot.join("firecracker").is_file());
    let pid = runtime.firecracker_pid(id).expect("the VMM runs");
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let needle = format!("--id={}", instance_id(id));
    assert!(cmdline
        .windows(needle.len())
        .any(|w| w == needle.as_bytes()));

    // Shared images: the same inode, untouched; the boot's own files: the uid's.
    let config_disk = paths.vm().config_disk();
    let volume = paths.vm().volume();
    for (name, host) in [
        ("vmlinux", &runtime.vmm.config.kernel),
        ("initrd.img", &runtime.vmm.config.initramfs),
        ("rootfs.img", &rootfs),
    ] {
        assert!(same_inode(&chroot.join(name), host), "{name}");
        assert_eq!(owner_mode(host), (0, 0, 0o644), "{name}");
    }
    assert!(same_inode(&chroot.join("volume.ext4"), &volume));
    assert_eq!(owner_mode(&volume), (uid, gid, 0o600));
    assert!(same_inode(&chroot.join("config.img"), &config_disk));
    assert_eq!(owner_mode(&config_disk), (uid, gid, 0o400));
    // The sockets dir is bound at its host path; only it is mounted.
    let sockets_inside = in_chroot(&chroot, &paths.sockets_dir());
    assert_eq!(
        mounts(&jailer(&runtime).jail_dir(&runtime.vmm.config.firecracker_bin, id)),
        std::slice::from_ref(&sockets_inside)
    );
    assert_eq!(owner_mode(&paths.sockets_dir()), (uid, gid, 0o700));
    // Through the chroot, as the jailed Firecracker reaches them: its API, and the egress
    // listener (the uid's, 0600). Via an fd of the dir: the chroot prefix plus the host path
    // is longer than a socket address may be.
    let inside = std::fs::File::open(&sockets_inside).unwrap();
    let short = |socket: &Path| {
        PathBuf::from(format!("/proc/self/fd/{}", inside.as_raw_fd()))
            .join(socket.file_name().unwrap())
    };
    let info = ApiClient::new(&short(&paths.api_socket()))
        .instance_info()
        .await
        .unwrap();
    assert_eq!(info.state, api::InstanceState::Running);
    let egress_inside = short(&paths.egress_socket());
    assert!(std::fs::metadata(&egress_inside)
        .unwrap()
        .file_type()
        .is_socket());
    assert_eq!(owner_mode(&paths.egress_socket()), (uid, gid, 0o600));
    let _guest_side = tokio::net::UnixStream::connect(&egress_inside)
        .await
        .unwrap();
    booted.egress.accept().await.unwrap();

    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Running);
    let started = Instant::now();
    runtime.stop(id, Duration::from_secs(30)).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_nothing_left(&runtime, id, Some(pid));
    assert_eq!(owner_mode(&volume), (0, 0, 0o600));
    runtime.remove(id).await.unwrap();
    assert!(!paths.vm().box_dir().exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_jailed_start_across_file_systems_leaves_nothing() {
    if !is_root() {
        berth_testkit::skip("root", "staging for the jailer needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // /dev/shm is another file system (tmpfs): the images are bind-mounted.
    let base = tempfile::Builder::new()
        .prefix("berth-jail-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let (runtime, rootfs) = jailed_runtime(dir.path(), base.path());
    let _cleanup = Cleanup(&runtime);
    let spec = spec(&rootfs);
    let id = &spec.id;
    let chroot = jailer(&runtime).chroot(&runtime.vmm.config.firecracker_bin, id);

    let stand_ins = stand_ins(&runtime, id, Some("/drives/berth_vol"));
    match runtime.start(&spec).await {
        Err(RuntimeError::Missing { what, .. }) if what.contains("mkfs") => {
            berth_testkit::skip("e2fsprogs", format!("no mkfs for the volume ({what})"));
            return;
        }
        Err(RuntimeError::Backend { status, .. }) => {
            assert!(status.contains("berth_vol"), "{status}")
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    let (_api, _guest, staged) = stand_ins.await.unwrap();
    // While it ran, every file was a bind mount, the read-only ones read-only.
    let mut names: Vec<String> = staged
        .iter()
        .filter(|m| m.parent() == Some(chroot.as_path()))
        .map(|m| m.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "config.img",
            "initrd.img",
            "rootfs.img",
            "vmlinux",
            "volume.ext4"
        ]
    );
    assert!(staged.contains(&in_chroot(&chroot, &runtime.files(id).sockets_dir())));
    assert_nothing_left(&runtime, id, None);
    assert_eq!(runtime.status(id).await.unwrap(), RuntimeStatus::Stopped);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_the_jailer_cannot_read_is_refused_and_nothing_stays() {
    if !is_root() {
        berth_testkit::skip("root", "staging for the jailer needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (runtime, rootfs) = jailed_runtime(dir.path(), &dir.path().join("jail"));
    let _cleanup = Cleanup(&runtime);
    crate::fs::set_mode(&rootfs, 0o600).unwrap();
    let spec = spec(&rootfs);
    match runtime.start(&spec).await {
        Err(RuntimeError::Missing { what, .. }) if what.contains("mkfs") => {
            berth_testkit::skip("e2fsprogs", format!("no mkfs for the volume ({what})"));
        }
        Err(RuntimeError::Io { path, source, .. }) => {
            assert_eq!(path, rootfs);
            assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied);
            assert_nothing_left(&runtime, &spec.id, None);
            assert_eq!(
                owner_mode(&rootfs),
                (0, 0, 0o600),
                "a shared image is never chowned"
            );
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
}

/// A crashed daemon leaves a chroot with its mounts; the next backend's sweep (what `new`
/// runs once it has probed the host) undoes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_at_new_undoes_a_crashed_daemons_jail() {
    if !is_root() {
        berth_testkit::skip("root", "staging for the jailer needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = tempfile::Builder::new()
        .prefix("berth-jail-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let (runtime, rootfs) = jailed_runtime(dir.path(), base.path());
    let _cleanup = Cleanup(&runtime);
    let spec = spec(&rootfs);
    let id = &spec.id;
    let jail_dir = jailer(&runtime).jail_dir(&runtime.vmm.config.firecracker_bin, id);

    let stand_ins = stand_ins(&runtime, id, None);
    match runtime.start(&spec).await {
        Ok(_) => {}
        Err(RuntimeError::Missing { what, .. }) if what.contains("mkfs") => {
            berth_testkit::skip("e2fsprogs", format!("no mkfs for the volume ({what})"));
            return;
        }
        Err(e) => panic!("{}", crate::error_chain(&e)),
    }
    let _stand_ins = stand_ins.await.unwrap();
    let pid = runtime.firecracker_pid(id).expect("the VMM runs");
    // SAFETY: kill(2) of the fake VMM, our child.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let killed = Instant::now();
    while runtime.firecracker_pid(id).is_some() {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "the VMM did not die"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !mounts(&jail_dir).is_empty(),
        "the crash left the jail staged"
    );

    let next = VmRuntime {
        vmm: Firecracker {
            config: runtime.vmm.config.clone(),
            layout: VmLayout::new(&runtime.vmm.config.data_dir),
            kvm: "test".into(),
        },
    };
    next.sweep_jails().unwrap();
    assert!(mounts(&jail_dir).is_empty());
    assert!(!jail_dir.exists());
    assert_eq!(owner_mode(&next.files(id).vm().volume()).0, 0);
}
