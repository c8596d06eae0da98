use std::os::unix::fs::{chown, lchown, PermissionsExt};

use super::*;
use crate::sandbox::paths::Layout;

/// What the box saw in its old directory volume, as (path, mode, box uid, content).
fn old_volume(paths: &BoxPaths, map: IdMap) {
    let v = paths.legacy_volume_dir();
    let user = map.host_id(1001);
    let root = map.host_id(0);
    let put = |rel: &str, content: Option<&str>, mode: u32, owner: u32| {
        let p = v.join(rel);
        match content {
            Some(c) => std::fs::write(&p, c).unwrap(),
            None => std::fs::create_dir_all(&p).unwrap(),
        }
        chown(&p, Some(owner), Some(owner)).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    std::fs::create_dir_all(&v).unwrap();
    put("home", None, 0o700, user);
    put("memory", None, 0o755, user);
    put("agent", None, 0o700, root);
    put("home/notes.txt", Some("my notes\n"), 0o640, user);
    put("home/run.sh", Some("#!/bin/sh\necho hi\n"), 0o755, user);
    put("home/root-made", Some("by box root\n"), 0o604, root);
    put("home/shared", None, 0o1777, user);
    put("home/setgid", None, 0o2750, user);
    put("home/empty", None, 0o750, user);
    put("memory/README.md", Some("# Memory\n"), 0o644, user);
    put("agent/journal", Some("{\"seq\":1}\n"), 0o600, root);
    // A host id outside the box's range (the box saw it as nobody).
    put("home/foreign", Some("not ours\n"), 0o644, 4242);
    std::os::unix::fs::symlink("notes.txt", v.join("home/link")).unwrap();
    lchown(v.join("home/link"), Some(user), Some(user)).unwrap();
    std::fs::hard_link(v.join("home/notes.txt"), v.join("home/hard")).unwrap();
    nix::unistd::mkfifo(
        &v.join("home/pipe"),
        nix::sys::stat::Mode::from_bits(0o620).unwrap(),
    )
    .unwrap();
    chown(v.join("home/pipe"), Some(user), Some(user)).unwrap();
    std::fs::set_permissions(v.join("home/pipe"), std::fs::Permissions::from_mode(0o620)).unwrap();
    let big = vec![7u8; 3 << 20];
    std::fs::write(v.join("home/big.bin"), &big).unwrap();
    chown(v.join("home/big.bin"), Some(user), Some(user)).unwrap();
    xattr_set(&v.join("home/notes.txt"), "user.tag", b"kept");
}

fn xattr_set(path: &Path, name: &str, value: &[u8]) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and a slice alive for the call.
    let rc = unsafe {
        libc::lsetxattr(
            p.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
}

fn xattr_get(path: &Path, name: &str) -> Vec<u8> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: valid C strings and a buffer of the given size.
    let len =
        unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(len >= 0, "{}", std::io::Error::last_os_error());
    buf.truncate(len as usize);
    buf
}

/// Unmounts and unbinds whatever a test mounted, also when it panics.
struct Unmount(PathBuf);
impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = crate::sandbox::idmap_mount::unmount(&self.0);
    }
}

#[test]
fn a_directory_volume_becomes_an_image_with_nothing_lost() {
    if !nix::unistd::geteuid().is_root() || !Path::new("/dev/loop-control").exists() {
        berth_testkit::skip("loop", "migration needs root and loop devices");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let id = berth_protocol::BoxId::from_random([6; 20]);
    let paths = Layout::new(dir.path()).box_paths(&id);
    std::fs::create_dir_all(paths.dir()).unwrap();
    let map = IdMap::for_slot(12).unwrap();
    old_volume(&paths, map);
    assert!(migrate_if_needed(&paths, map, 128).unwrap());
    assert!(
        !paths.legacy_volume_dir().exists(),
        "the directory is removed"
    );
    assert!(!paths.dir().join(STAGING).exists());
    assert_eq!(
        std::fs::metadata(paths.volume_image()).unwrap().len(),
        128 * MIB
    );
    // Nothing to do the second time.
    assert!(!migrate_if_needed(&paths, map, 128).unwrap());

    // Read it back with the on-disk (0-based) ids: what the box sees.
    let mnt = dir.path().join("check");
    std::fs::create_dir(&mnt).unwrap();
    let device = attach(&paths.volume_image()).unwrap();
    nix::mount::mount(
        Some(&device.path()),
        &mnt,
        Some("ext4"),
        nix::mount::MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .unwrap();
    let _guard = Unmount(mnt.clone());
    drop(device);
    let stat = |rel: &str| std::fs::symlink_metadata(mnt.join(rel)).unwrap();
    for (rel, mode, uid) in [
        ("", 0o755, 0),
        ("home", 0o40700, 1001),
        ("memory", 0o40755, 1001),
        ("agent", 0o40700, 0),
        ("home/notes.txt", 0o100640, 1001),
        ("home/run.sh", 0o100755, 1001),
        ("home/root-made", 0o100604, 0),
        ("home/shared", 0o41777, 1001),
        ("home/setgid", 0o42750, 1001),
        ("home/empty", 0o40750, 1001),
        ("memory/README.md", 0o100644, 1001),
        ("agent/journal", 0o100600, 0),
        ("home/foreign", 0o100644, OVERFLOW_ID),
        ("home/pipe", 0o10620, 1001),
        ("home/link", 0o120777, 1001),
    ] {
        let meta = stat(rel);
        if !rel.is_empty() {
            assert_eq!(meta.mode(), mode, "{rel}: mode {:o}", meta.mode());
        }
        assert_eq!((meta.uid(), meta.gid()), (uid, uid), "{rel}: owner");
    }
    for (rel, content) in [
        ("home/notes.txt", "my notes\n"),
        ("home/run.sh", "#!/bin/sh\necho hi\n"),
        ("home/root-made", "by box root\n"),
        ("memory/README.md", "# Memory\n"),
        ("agent/journal", "{\"seq\":1}\n"),
        ("home/link", "my notes\n"),
    ] {
        assert_eq!(
            std::fs::read_to_string(mnt.join(rel)).unwrap(),
            content,
            "{rel}"
        );
    }
    assert_eq!(
        std::fs::read_link(mnt.join("home/link")).unwrap(),
        Path::new("notes.txt")
    );
    assert_eq!(stat("home/hard").ino(), stat("home/notes.txt").ino());
    assert_eq!(stat("home/notes.txt").nlink(), 2);
    assert_eq!(
        std::fs::read_dir(mnt.join("home/empty")).unwrap().count(),
        0
    );
    assert_eq!(
        std::fs::read(mnt.join("home/big.bin")).unwrap(),
        vec![7u8; 3 << 20]
    );
    assert_eq!(xattr_get(&mnt.join("home/notes.txt"), "user.tag"), b"kept");
}

#[test]
fn the_image_is_at_least_the_data_plus_headroom() {
    if !nix::unistd::geteuid().is_root() || !Path::new("/dev/loop-control").exists() {
        berth_testkit::skip("loop", "migration needs root and loop devices");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let paths = BoxPaths::at(dir.path().join("bx"));
    std::fs::create_dir_all(paths.legacy_volume_dir().join("home")).unwrap();
    std::fs::write(
        paths.legacy_volume_dir().join("home/big"),
        vec![1u8; 40 << 20],
    )
    .unwrap();
    assert!(migrate_if_needed(&paths, IdMap::for_slot(14).unwrap(), 16).unwrap());
    let size = std::fs::metadata(paths.volume_image()).unwrap().len();
    assert!(size >= (40 + HEADROOM_MIB) * MIB, "{size}");
}

#[test]
fn a_failed_migration_keeps_the_directory() {
    if !nix::unistd::geteuid().is_root() || !Path::new("/dev/loop-control").exists() {
        berth_testkit::skip("loop", "migration needs root and loop devices");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let paths = BoxPaths::at(dir.path().join("bx"));
    std::fs::create_dir_all(paths.legacy_volume_dir().join("home")).unwrap();
    std::fs::write(paths.legacy_volume_dir().join("home/a"), "a").unwrap();
    let map = IdMap::for_slot(13).unwrap();
    // mkfs cannot make an image that large: the step after the copy fails.
    let err = migrate_if_needed(&paths, map, u64::MAX / MIB + 1).unwrap_err();
    assert!(matches!(err, VolumeError::Image { .. }), "{err}");
    assert_eq!(
        std::fs::read_to_string(paths.legacy_volume_dir().join("home/a")).unwrap(),
        "a"
    );
    assert!(!paths.volume_image().exists());
    assert!(!paths.dir().join(STAGING).exists());
}
