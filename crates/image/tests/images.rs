//! Real builds with the host's tools: the Debian cloud kernel through apt, the initramfs,
//! the minimal and desktop rootfs, a layer, and a box volume, checked with debugfs and
//! dumpe2fs.
//! A test whose tool or mirror is missing skips with the reason (`berth_testkit::skip`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use berth_image::*;

/// `(mode, uid, gid)` of `path` inside the ext4 `image`, from `debugfs -R stat`.
fn stat(image: &Path, path: &str) -> (u32, u32, u32) {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("stat {path}"))
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let after = |word: &str| -> u32 {
        let mut it = text.split_whitespace();
        it.find(|t| *t == word)
            .and_then(|_| it.next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {word} in stat {path}: {text} {out:?}"))
    };
    let mode_text = {
        let mut it = text.split_whitespace();
        it.find(|t| *t == "Mode:")
            .and_then(|_| it.next())
            .unwrap()
            .to_string()
    };
    let mode = u32::from_str_radix(&mode_text, 8).unwrap();
    (mode, after("User:"), after("Group:"))
}

fn debugfs_cat(image: &Path, path: &str) -> String {
    let out = Command::new("debugfs")
        .arg("-R")
        .arg(format!("cat {path}"))
        .arg(image)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `dumpe2fs -h` field, e.g. "Filesystem volume name".
fn superblock(image: &Path, field: &str) -> String {
    let out = Command::new("dumpe2fs")
        .arg("-h")
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')
                .map(|v| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no {field} in dumpe2fs of {}", image.display()))
}

/// `e2fsck -fn`: the image is a clean file system.
fn assert_fsck_clean(image: &Path) {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg(image)
        .output()
        .unwrap();
    assert!(out.status.success(), "e2fsck {}: {out:?}", image.display());
}

fn have(tool: &str) -> bool {
    ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).exists())
}

fn mtime(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path).unwrap().modified().unwrap()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Skips (with the reason) when apt cannot reach the mirror or a tool is missing.
macro_rules! or_skip {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e @ (ImageError::NoMirror { .. } | ImageError::MissingTool { .. })) => {
                berth_testkit::skip("image-build", &e);
                return;
            }
            Err(e) => panic!("{e}"),
        }
    };
}

#[test]
fn debian_cloud_kernel_is_fetched_once_with_its_vm_modules_and_goes_into_an_initramfs() {
    let data = tempfile::tempdir().unwrap();
    let store = ImageStore::new(data.path());
    let started = Instant::now();
    let kernel = or_skip!(Kernel::debian_cloud(&store, &NoProgress));
    let first = started.elapsed();
    let head = std::fs::read(&kernel.vmlinuz).unwrap();
    assert_eq!(&head[0x202..0x206], b"HdrS", "a bzImage");
    let modules = kernel
        .modules
        .clone()
        .expect("the cloud kernel has modules");
    assert!(
        modules.version.ends_with("-cloud-amd64"),
        "{}",
        modules.version
    );
    // Every wanted module, each after what it needs (modules.dep).
    let names: Vec<String> = modules
        .load_order
        .iter()
        .map(|p| {
            p.rsplit('/')
                .next()
                .unwrap()
                .trim_end_matches(".ko")
                .to_string()
        })
        .collect();
    for m in VM_MODULES {
        assert!(names.iter().any(|n| n == m), "{m} missing from {names:?}");
    }
    let dep = std::fs::read_to_string(modules.dir.join("modules.dep")).unwrap();
    for line in dep.lines() {
        let (module, deps) = line.split_once(':').unwrap();
        let at = modules.load_order.iter().position(|p| p == module).unwrap();
        for d in deps.split_whitespace() {
            let d_at = modules.load_order.iter().position(|p| p == d).unwrap();
            assert!(d_at < at, "{d} must load before {module}");
        }
        assert!(modules.dir.join(module).is_file(), "{module}");
    }
    eprintln!(
        "kernel {} fetched in {first:?}: vmlinuz {} bytes, {} modules",
        modules.version,
        head.len(),
        modules.load_order.len()
    );

    // Second call: same kernel, no download, nothing rewritten.
    let before = mtime(&kernel.vmlinuz);
    let started = Instant::now();
    let again = Kernel::debian_cloud(&store, &NoProgress).unwrap();
    assert_eq!(again, kernel);
    assert_eq!(mtime(&kernel.vmlinuz), before);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "cached: {:?}",
        started.elapsed()
    );
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );

    // The initramfs with a static stand-in for berth-init.
    let init = data.path().join("init");
    let mut elf = vec![0u8; 64];
    elf[..5].copy_from_slice(b"\x7fELF\x02");
    std::fs::write(&init, &elf).unwrap();
    let initramfs = build_initramfs(&store, &kernel, &init, &NoProgress).unwrap();
    let archive = std::fs::read(&initramfs.path).unwrap();
    let names = cpio_names(&archive);
    assert!(names.iter().any(|n| n == "berth-init"));
    for m in &modules.load_order {
        let want = format!("lib/modules/{}/{m}", modules.version);
        assert!(names.contains(&want), "{want}");
    }
    assert!(names.contains(&format!("lib/modules/{}/modules.dep", modules.version)));
    eprintln!("initramfs: {} bytes", archive.len());
}

/// Entry names of a newc archive.
fn cpio_names(mut buf: &[u8]) -> Vec<String> {
    let total = buf.len();
    let mut names = Vec::new();
    loop {
        assert_eq!(&buf[..6], b"070701");
        let field = |i: usize| {
            usize::from_str_radix(
                std::str::from_utf8(&buf[6 + i * 8..14 + i * 8]).unwrap(),
                16,
            )
            .unwrap()
        };
        let (size, namesize) = (field(6), field(11));
        let name = String::from_utf8(buf[110..110 + namesize - 1].to_vec()).unwrap();
        let pad = |pos: usize| pos + (4 - (total - buf.len() + pos) % 4) % 4;
        let next = pad(pad(110 + namesize) + size);
        if name == "TRAILER!!!" {
            return names;
        }
        names.push(name);
        buf = &buf[next..];
    }
}

#[test]
fn minimal_rootfs_is_a_read_only_ext4_with_busybox_and_the_skeleton_built_once() {
    if !have("mkfs.ext4") || !have("debugfs") {
        berth_testkit::skip("e2fsprogs", "e2fsprogs is not installed");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let store = ImageStore::new(data.path());
    let started = Instant::now();
    let image = or_skip!(rootfs_minimal(&store, &NoProgress));
    let first = started.elapsed();
    let on_disk = std::fs::metadata(&image.path).unwrap();
    eprintln!(
        "minimal rootfs in {first:?}: {} MiB image, {} KiB used",
        image.size_bytes >> 20,
        std::os::unix::fs::MetadataExt::blocks(&on_disk) / 2
    );
    assert_eq!(
        superblock(&image.path, "Filesystem volume name"),
        ROOTFS_LABEL
    );
    assert!(!superblock(&image.path, "Filesystem features").contains("has_journal"));
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&on_disk.permissions()) & 0o777,
        0o444
    );
    assert_eq!(stat(&image.path, "/bin/busybox"), (0o755, 0, 0));
    assert_eq!(stat(&image.path, "/tmp").0, 0o1777);
    assert_eq!(stat(&image.path, "/root").0, 0o700);
    for dir in [
        "/proc",
        "/sys",
        "/dev",
        "/run",
        "/home/user",
        "/memory",
        "/var/lib/berth",
        "/etc/ssl/certs",
    ] {
        assert_eq!(stat(&image.path, dir).1, 0, "{dir}");
    }
    assert!(
        debugfs_cat(&image.path, "/etc/passwd").contains("user:x:1001:1001::/home/user:/bin/sh")
    );
    assert!(debugfs_cat(&image.path, "/etc/hosts").contains("localhost"));
    // An applet link.
    let sh = Command::new("debugfs")
        .arg("-R")
        .arg("stat /bin/sh")
        .arg(&image.path)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&sh.stdout).contains("Fast link dest: \"/bin/busybox\""));

    // Second build: no mkfs (the image is untouched) and fast.
    let before = mtime(&image.path);
    let started = Instant::now();
    let again = rootfs_minimal(&store, &NoProgress).unwrap();
    assert_eq!(again, image);
    assert_eq!(mtime(&image.path), before);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        std::fs::read_dir(store.root().join("tmp")).unwrap().count(),
        0
    );
}

#[test]
fn layer_image_keeps_owners_and_modes_and_is_keyed_by_content() {
    if !have("mkfs.ext4") || !have("debugfs") {
        berth_testkit::skip("e2fsprogs", "e2fsprogs is not installed");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let data = tempfile::tempdir().unwrap();
    let store = ImageStore::new(data.path());
    let layer = data.path().join("layer");
    std::fs::create_dir_all(layer.join("bin")).unwrap();
    std::fs::write(layer.join("bin/agent"), "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(
        layer.join("bin/agent"),
        std::fs::Permissions::from_mode(0o750),
    )
    .unwrap();
    std::fs::write(layer.join("secret"), "s").unwrap();
    std::fs::set_permissions(layer.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let owner = if is_root() {
        std::os::unix::fs::chown(layer.join("secret"), Some(1001), Some(1001)).unwrap();
        1001
    } else {
        std::fs::metadata(layer.join("secret"))
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .unwrap()
    };
    let image = layer_image(&store, &layer, &NoProgress).unwrap();
    assert_eq!(
        superblock(&image.path, "Filesystem volume name"),
        LAYER_LABEL
    );
    assert_eq!(stat(&image.path, "/bin/agent").0, 0o750);
    assert_eq!(stat(&image.path, "/secret"), (0o600, owner, owner));
    assert_eq!(debugfs_cat(&image.path, "/bin/agent"), "#!/bin/sh\n");
    let before = mtime(&image.path);
    assert_eq!(layer_image(&store, &layer, &NoProgress).unwrap(), image);
    assert_eq!(mtime(&image.path), before);
    std::fs::write(layer.join("secret"), "t").unwrap();
    let changed = layer_image(&store, &layer, &NoProgress).unwrap();
    assert_ne!(changed.key, image.key);
    assert_eq!(debugfs_cat(&changed.path, "/secret"), "t");
}

#[test]
fn volume_has_the_box_layout_grows_and_never_shrinks() {
    if !have("mkfs.ext4") || !have("debugfs") || !have("resize2fs") {
        berth_testkit::skip("e2fsprogs", "e2fsprogs is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let vol = dir.path().join("boxes/b1/volume.ext4");
    let started = Instant::now();
    create_volume(&vol, 64).unwrap();
    eprintln!("64 MiB volume created in {:?}", started.elapsed());
    let meta = std::fs::metadata(&vol).unwrap();
    assert_eq!(meta.len(), 64 << 20);
    let used = std::os::unix::fs::MetadataExt::blocks(&meta) * 512;
    assert!(
        used < meta.len() / 2,
        "sparse: {used} bytes used of {}",
        meta.len()
    );
    assert_eq!(superblock(&vol, "Filesystem volume name"), VOLUME_LABEL);
    assert!(superblock(&vol, "Filesystem features").contains("has_journal"));
    assert_eq!(stat(&vol, "/home"), (0o700, 1001, 1001));
    assert_eq!(stat(&vol, "/memory"), (0o755, 1001, 1001));
    assert_eq!(stat(&vol, "/agent"), (0o700, 0, 0));
    assert_eq!(stat(&vol, "/"), (0o755, 0, 0));
    // Empty: berth-init seeds it from the template's layout on the first boot.
    assert!(debugfs_cat(&vol, "/memory/README.md").is_empty());

    // Creating over it is refused; the same size is no change.
    assert!(create_volume(&vol, 64).is_err());
    assert_eq!(ensure_volume(&vol, 64).unwrap(), VolumeChange::Unchanged);
    let blocks = |v: &Path| superblock(v, "Block count").parse::<u64>().unwrap();
    let before = blocks(&vol);
    assert_eq!(
        ensure_volume(&vol, 96).unwrap(),
        VolumeChange::Grown { from_mib: 64 }
    );
    assert_eq!(std::fs::metadata(&vol).unwrap().len(), 96 << 20);
    assert_eq!(blocks(&vol), before * 96 / 64);
    assert_fsck_clean(&vol);
    // The content survived the resize.
    assert_eq!(stat(&vol, "/home"), (0o700, 1001, 1001));
    match grow_volume(&vol, 32) {
        Err(ImageError::Shrink {
            current_mib,
            requested_mib,
            ..
        }) => {
            assert_eq!((current_mib, requested_mib), (96, 32));
        }
        other => panic!("expected Shrink, got {other:?}"),
    }
    assert!(matches!(
        create_volume(&dir.path().join("tiny"), 1),
        Err(ImageError::Invalid { .. })
    ));
    // No scratch dir left beside it.
    let left: Vec<_> = std::fs::read_dir(vol.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("volume.ext4")]);
}

#[test]
fn ext4_from_dir_copies_a_tree_and_a_size_too_small_is_an_error() {
    if !have("mkfs.ext4") {
        berth_testkit::skip("e2fsprogs", "e2fsprogs is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("big"), vec![7u8; 3 << 20]).unwrap();
    let out = dir.path().join("out.ext4");
    let size = ext4_from_dir(&tree, &out, "test", None).unwrap();
    assert_eq!(std::fs::metadata(&out).unwrap().len(), size);
    assert_eq!(debugfs_cat(&out, "/big").len(), 3 << 20);
    let err = ext4_from_dir(&tree, &out, "test", Some(2)).unwrap_err();
    assert!(matches!(err, ImageError::ToolFailed { .. }), "{err}");
    assert!(!out.exists(), "a failed image is removed");
    assert!(matches!(
        ext4_from_dir(&tree, &out, "a label too long", None),
        Err(ImageError::Invalid { .. })
    ));
}

/// Runs debootstrap for real (about 40 s and the Debian mirror): `cargo test -p berth-image
/// -- --ignored debian`.
#[test]
#[ignore = "debootstraps bookworm from the Debian mirror (~40 s); run with --ignored"]
fn debian_rootfs_is_debootstrapped_once() {
    if !is_root() {
        berth_testkit::skip("root", "debootstrap needs root");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let store = ImageStore::new(data.path());
    let started = Instant::now();
    let image = or_skip!(rootfs_debian(
        &store,
        DEBIAN_SUITE,
        DEBIAN_PACKAGES,
        &TerminalProgress::new()
    ));
    let used =
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&image.path).unwrap()) * 512;
    eprintln!(
        "debian rootfs in {:?}: {} MiB image, {} MiB used",
        started.elapsed(),
        image.size_bytes >> 20,
        used >> 20
    );
    assert_eq!(stat(&image.path, "/usr/bin/python3").1, 0);
    assert!(debugfs_cat(&image.path, "/etc/passwd").contains(":1001:1001:"));
    assert_eq!(stat(&image.path, "/var/lib/berth").1, 0);
    let before = mtime(&image.path);
    assert_eq!(
        rootfs_debian(&store, DEBIAN_SUITE, DEBIAN_PACKAGES, &NoProgress).unwrap(),
        image
    );
    assert_eq!(mtime(&image.path), before);
}

/// Builds the `desktop` rootfs into the machine's test image cache
/// (`berth_testkit::image_cache`), where `berth image build --template desktop` in the
/// end-to-end tests finds it too: debootstrap runs minutes once per machine, and every later
/// run finds the image.
#[test]
fn desktop_rootfs_has_x_xfce_vnc_and_the_e2b_additions_and_is_built_once_per_machine() {
    if !is_root() {
        berth_testkit::skip("root", "debootstrap needs root");
        return;
    }
    let store = ImageStore::new(&berth_testkit::image_cache::dir());
    let started = Instant::now();
    let image = or_skip!(rootfs_desktop(&store, &TerminalProgress::new()));
    let used =
        std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&image.path).unwrap()) * 512;
    eprintln!(
        "desktop rootfs {} in {:?}: {} MiB image, {} MiB used",
        image.path.display(),
        started.elapsed(),
        image.size_bytes >> 20,
        used >> 20
    );
    for program in [
        "/usr/bin/Xvfb",
        "/usr/bin/xdotool",
        "/usr/bin/scrot",
        "/usr/bin/x11vnc",
        "/usr/bin/startxfce4",
        "/usr/bin/mousepad",
        "/usr/bin/thunar",
        "/usr/bin/xdpyinfo",
        "/usr/bin/dbus-launch",
        "/usr/share/novnc/utils/novnc_proxy",
    ] {
        let (mode, owner, _) = stat(&image.path, program);
        assert!(
            mode & 0o111 != 0 && owner == 0,
            "{program}: {mode:o} {owner}"
        );
    }
    for (path, text) in DESKTOP_ADDITIONS.scripts {
        assert_eq!(debugfs_cat(&image.path, &format!("/{path}")), *text);
        let (mode, owner, _) = stat(&image.path, &format!("/{path}"));
        assert_eq!((mode & 0o777, owner), (0o755, 0), "/{path}");
    }
    for (path, target) in DESKTOP_ADDITIONS.links {
        let out = Command::new("debugfs")
            .arg("-R")
            .arg(format!("stat /{path}"))
            .arg(&image.path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.contains(&format!("Fast link dest: \"{target}\"")),
            "/{path}: {text}"
        );
    }
    assert!(debugfs_cat(&image.path, "/etc/passwd").contains(":1001:1001:"));
    // The next build finds it: no debootstrap, no apt.
    let before = mtime(&image.path);
    let started = Instant::now();
    assert_eq!(rootfs_desktop(&store, &NoProgress).unwrap(), image);
    assert_eq!(mtime(&image.path), before);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_users_directory_or_tarball_becomes_a_rootfs_with_the_skeleton() {
    if !have("mkfs.ext4") || !have("debugfs") {
        berth_testkit::skip("e2fsprogs", "e2fsprogs is not installed");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let store = ImageStore::new(data.path());
    let base = data.path().join("base");
    std::fs::create_dir_all(base.join("etc")).unwrap();
    std::fs::write(base.join("etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::fs::write(base.join("hello"), "hi").unwrap();
    let from_dir = rootfs_from_dir(&store, &base, &NoProgress).unwrap();
    assert_eq!(debugfs_cat(&from_dir.path, "/hello"), "hi");
    assert_eq!(
        debugfs_cat(&from_dir.path, "/etc/passwd"),
        "root:x:0:0:root:/root:/bin/bash\nuser:x:1001:1001::/home/user:/bin/sh\n"
    );
    assert_eq!(stat(&from_dir.path, "/tmp").0, 0o1777);
    // The user's tree is untouched.
    assert!(!base.join("tmp").exists());
    assert_eq!(
        std::fs::read_to_string(base.join("etc/passwd")).unwrap(),
        "root:x:0:0:root:/root:/bin/bash\n"
    );
    assert_eq!(
        rootfs_from_dir(&store, &base, &NoProgress).unwrap(),
        from_dir
    );

    let tarball = data.path().join("base.tar");
    let tar = Command::new("tar")
        .arg("-cf")
        .arg(&tarball)
        .arg("-C")
        .arg(&base)
        .arg(".")
        .status()
        .unwrap();
    assert!(tar.success());
    let from_tar = rootfs_from_tarball(&store, &tarball, &NoProgress).unwrap();
    assert_ne!(from_tar.key, from_dir.key);
    assert_eq!(debugfs_cat(&from_tar.path, "/hello"), "hi");
    assert!(debugfs_cat(&from_tar.path, "/etc/passwd").contains(":1001:1001:"));
}
