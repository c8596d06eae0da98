//! The sandbox on a rootfs image (`sandbox_image::*`): the image is mounted read-only and
//! idmapped for the length of a boot, its root-owned files are box root's, nothing of the
//! box can write it, and no mount or loop device outlives the box (nor a daemon crash).

use std::path::Path;

use berth_protocol::guest::BoxUser;
use berth_runtime::{Layer, Limits};

use crate::common::{self, run, run_ok, Fixture};
use crate::GRACE;

/// `/` is the image, read-only even for box root (no write, no remount, no unmount of a
/// bind over it); the image's root-owned files show owner 0 inside (the idmap), and the
/// image file on the host is unchanged by a box that tried.
pub async fn root_is_read_only_even_for_box_root_and_owned_by_box_root(fx: &Fixture) {
    let sandbox = fx.sandbox().expect("a sandbox check");
    let image = fx
        .sandbox_image
        .clone()
        .expect("a sandbox on a rootfs image");
    let before = fingerprint(&image);
    let spec = fx.spec(Limits::default());
    let client = fx.runtime.start(&spec).await.expect("start").client;
    assert!(sandbox.rootfs_image_mounted(&spec.id));
    // Busybox: the minimal image, not the host's /usr.
    let busybox = run_ok(
        &client,
        &["stat", "-c", "%u %g %a", "/bin/busybox"],
        BoxUser::User,
    )
    .await;
    assert_eq!(busybox.split(' ').take(2).collect::<Vec<_>>(), ["0", "0"]);
    assert_eq!(
        run_ok(
            &client,
            &["stat", "-c", "%u %g", "/", "/etc/passwd"],
            BoxUser::User
        )
        .await
        .lines()
        .collect::<Vec<_>>(),
        ["0 0", "0 0"]
    );
    for (what, script) in [
        ("create a file in /", "touch /new"),
        ("create a file in /etc", "touch /etc/new"),
        ("overwrite /etc/passwd", "echo x >> /etc/passwd"),
        ("remove /bin/busybox", "rm -f /bin/busybox"),
        ("chown a file", "chown 1001 /etc/passwd"),
        (
            "remount / read-write",
            "mount -o remount,rw / && touch /new",
        ),
        ("overwrite /etc/hosts", "echo x >> /etc/hosts"),
    ] {
        let (code, _, _) = run(&client, &["sh", "-c", script], BoxUser::Root, None).await;
        assert_ne!(code, 0, "box root could {what}");
    }
    let (code, _, _) = run(&client, &["touch", "/new"], BoxUser::User, None).await;
    assert_ne!(code, 0, "the user could create a file in /");
    assert_eq!(
        run_ok(&client, &["ls", "/bin/busybox"], BoxUser::User)
            .await
            .trim(),
        "/bin/busybox"
    );
    // On the host: mounted read-only, from a read-only loop device.
    let device = sandbox.rootfs_loop_device(&spec.id).expect("a loop device");
    assert_eq!(
        std::fs::read_to_string(format!("/sys/block/loop{device}/ro"))
            .unwrap()
            .trim(),
        "1"
    );
    let options = mount_options(&sandbox.layout().box_paths(&spec.id).rootfs_mount());
    assert!(
        options.split(',').any(|o| o == "ro"),
        "the rootfs mount is not read-only: {options}"
    );
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    assert_eq!(fingerprint(&image), before, "the image changed");
}

/// The rootfs image is mounted only while the box runs: stop unmounts it and frees its loop
/// device; a box that died with the daemon has its mount released by the next runtime on
/// the data dir, while a box that still runs keeps its own.
pub async fn stop_releases_the_rootfs_mount_and_its_loop_device(fx: &Fixture) {
    let sandbox = fx.sandbox().expect("a sandbox check");
    let image = fx
        .sandbox_image
        .clone()
        .expect("a sandbox on a rootfs image");
    let spec = fx.spec(Limits::default());
    fx.runtime.start(&spec).await.expect("start");
    let device = sandbox.rootfs_loop_device(&spec.id).expect("a loop device");
    assert_eq!(backing_file(device).as_deref(), Some(image.as_path()));
    fx.runtime.stop(&spec.id, GRACE).await.expect("stop");
    assert!(!sandbox.rootfs_image_mounted(&spec.id));
    wait_device_released(fx, device, &image).await;
    assert_eq!(fx.traces_left(&spec.id), Vec::<String>::new());

    // Two boxes up; the daemon dies; one box dies with it, the other lives on.
    let dies = common::next_boot(&spec);
    let lives = fx.spec(Limits::default());
    fx.runtime.start(&dies).await.expect("start");
    let client = fx.runtime.start(&lives).await.expect("start").client;
    let dead_device = sandbox.rootfs_loop_device(&dies.id).expect("a loop device");
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
    assert!(
        sandbox.rootfs_image_mounted(&dies.id),
        "nothing released it yet"
    );
    let restarted = berth_runtime::sandbox::SandboxRuntime::new(sandbox.config().clone())
        .expect("a new runtime on the same data dir");
    assert!(!restarted.rootfs_image_mounted(&dies.id));
    wait_device_released(fx, dead_device, &image).await;
    assert!(restarted.rootfs_image_mounted(&lives.id));
    assert_eq!(
        run_ok(&client, &["cat", "/etc/passwd"], BoxUser::User)
            .await
            .lines()
            .next(),
        Some("root:x:0:0:root:/root:/bin/sh")
    );
    // The box that died starts again.
    fx.runtime
        .start(&common::next_boot(&dies))
        .await
        .expect("start after the crash");
    for id in [&dies.id, &lives.id] {
        fx.runtime.stop(id, GRACE).await.expect("stop");
        assert!(!sandbox.rootfs_image_mounted(id));
    }
}

/// A layer whose target the image lacks fails the start with an error naming the target
/// (the sandbox never writes into the image), and leaves nothing mounted or running.
pub async fn a_mount_point_missing_in_the_image_fails_the_start_naming_it(fx: &Fixture) {
    let sandbox = fx.sandbox().expect("a sandbox check");
    let layer = common::layer_dir(&[("data.txt", "x\n", 0o644)]);
    let mut spec = fx.spec(Limits::default());
    spec.layers = vec![Layer {
        source: layer.path().to_path_buf(),
        target: "/opt/not-in-the-image".into(),
    }];
    let err = match fx.runtime.start(&spec).await {
        Ok(_) => panic!("a box started with a layer target its image lacks"),
        Err(e) => berth_runtime::error_chain(&e),
    };
    assert!(
        err.contains("/opt/not-in-the-image") && err.contains("mount point"),
        "{err}"
    );
    assert!(!sandbox.rootfs_image_mounted(&spec.id));
    assert!(!sandbox.volume_mounted(&spec.id));
    assert!(fx.box_processes(&spec).is_empty());
    assert_eq!(fx.traces_left(&spec.id), Vec::<String>::new());
}

/// Size and modification time: any write through a mount would change the latter.
fn fingerprint(image: &Path) -> (u64, std::time::SystemTime) {
    let meta = std::fs::metadata(image).unwrap();
    (meta.len(), meta.modified().unwrap())
}

/// The options of the mount at `target` in this process's mount table.
fn mount_options(target: &Path) -> String {
    let target = std::fs::canonicalize(target).unwrap();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    table
        .lines()
        .find(|l| l.split(' ').nth(4).map(Path::new) == Some(target.as_path()))
        .and_then(|l| l.split(' ').nth(5))
        .unwrap_or_else(|| panic!("nothing mounted at {}", target.display()))
        .to_owned()
}

fn backing_file(device: u32) -> Option<std::path::PathBuf> {
    std::fs::read_to_string(format!("/sys/block/loop{device}/loop/backing_file"))
        .ok()
        .map(|s| s.trim_end().into())
}

/// Waits until loop device `device` no longer holds `image` for the box: unbound, bound to
/// another file, or (the image is shared by every box of the test binary) mounted by
/// another box.
async fn wait_device_released(fx: &Fixture, device: u32, image: &Path) {
    let source = format!(" /dev/loop{device} ");
    common::wait_until_within(fx.patience(), || {
        let source = source.clone();
        async move {
            if backing_file(device).as_deref() != Some(image) {
                return true;
            }
            std::fs::read_to_string("/proc/self/mountinfo")
                .unwrap()
                .lines()
                .any(|l| {
                    l.split_once(" - ")
                        .is_some_and(|(_, r)| r.contains(&source))
                })
        }
    })
    .await;
}
