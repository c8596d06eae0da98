//! What berth adds to every rootfs image: the mount points berth-init uses in a VM and the
//! sandbox's bundle binds over (the run dir's `/run`, the volume's `/home/user`, `/memory`
//! and `/var/lib/berth`, the files `/etc/hosts`, the trust bundle and `/.berth/berth-init`),
//! and a minimal `/etc` (the same users as the sandbox's host skeleton in
//! crates/runtime/src/sandbox/rootfs.rs).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::io;
use crate::ImageError;

/// Directories berth-init mounts over or writes under, with their modes. The rootfs is
/// read-only in the VM, so they must exist in the image.
const MOUNT_POINTS: &[(&str, u32)] = &[
    ("proc", 0o555),
    ("sys", 0o555),
    ("dev", 0o755),
    ("tmp", 0o1777),
    ("run", 0o755),
    ("home", 0o755),
    ("home/user", 0o755),
    ("memory", 0o755),
    ("root", 0o700),
    ("etc", 0o755),
    ("etc/ssl", 0o755),
    ("etc/ssl/certs", 0o755),
    ("var", 0o755),
    ("var/lib", 0o755),
    ("var/lib/berth", 0o755),
    ("opt", 0o755),
    ("mnt", 0o755),
    // The sandbox binds berth-init at /.berth/berth-init (a VM runs it from the initramfs).
    (".berth", 0o755),
];

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
user:x:1001:1001::/home/user:/bin/sh\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nuser:x:1001:\nnogroup:x:65534:\n";
const USER_LINE: &str = "user:x:1001:1001::/home/user:/bin/sh\n";
const USER_GROUP_LINE: &str = "user:x:1001:\n";
const HOSTS: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
/// The box has no network of its own: no name servers.
const RESOLV_CONF: &str = "# berth: this box has no network of its own\n";
const NSSWITCH: &str = "passwd: files\ngroup: files\nshadow: files\nhosts: files\n";
/// berth-init binds the box's trust bundle over this file (a read-only rootfs cannot get a
/// mount point at boot): a distribution's own bundle stays as it is, else an empty file.
const CA_BUNDLE: &str = "etc/ssl/certs/ca-certificates.crt";
/// The sandbox binds berth-init over this file (its own path in the host rootfs skeleton).
const SANDBOX_INIT: &str = ".berth/berth-init";

/// Everything the skeleton adds, for content keys: a change here rebuilds the images.
pub(crate) fn fingerprint() -> String {
    let dirs: Vec<String> = MOUNT_POINTS
        .iter()
        .map(|(d, m)| format!("{d}:{m:o}"))
        .collect();
    [
        &dirs.join(","),
        PASSWD,
        GROUP,
        HOSTS,
        RESOLV_CONF,
        NSSWITCH,
        CA_BUNDLE,
        SANDBOX_INIT,
    ]
    .join("\n--\n")
}

/// Adds the skeleton to the tree at `root`. A distribution's own `/etc/passwd` and
/// `/etc/group` are kept, with the box user added when missing; `hosts` and `resolv.conf`
/// are berth's.
pub(crate) fn apply(root: &Path) -> Result<(), ImageError> {
    for (dir, mode) in MOUNT_POINTS {
        let path = root.join(dir);
        // A distribution's link (e.g. /var/run) stays as it is.
        if path
            .symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
        {
            continue;
        }
        std::fs::create_dir_all(&path).map_err(io("create the directory", &path))?;
        set_mode(&path, *mode)?;
    }
    let etc = root.join("etc");
    merge(&etc.join("passwd"), PASSWD, USER_LINE, ":1001:")?;
    merge(&etc.join("group"), GROUP, USER_GROUP_LINE, ":1001:")?;
    write(&etc.join("hosts"), HOSTS)?;
    write(&etc.join("resolv.conf"), RESOLV_CONF)?;
    if !etc.join("nsswitch.conf").exists() {
        write(&etc.join("nsswitch.conf"), NSSWITCH)?;
    }
    let bundle = root.join(CA_BUNDLE);
    if bundle.symlink_metadata().is_err() {
        write(&bundle, "")?;
    }
    write(&root.join(SANDBOX_INIT), "")?;
    Ok(())
}

/// Writes `fresh` when `path` is missing, else appends `line` unless an entry has `needle`
/// (the uid) or the same name.
fn merge(path: &Path, fresh: &str, line: &str, needle: &str) -> Result<(), ImageError> {
    let Ok(existing) = std::fs::read_to_string(path) else {
        return write(path, fresh);
    };
    let name = line.split(':').next().unwrap_or_default();
    let has = existing.lines().any(|l| {
        l.split(':').next() == Some(name) || l.split(':').nth(2) == Some(needle.trim_matches(':'))
    });
    if has {
        return Ok(());
    }
    let mut text = existing;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    write(path, &text)
}

fn write(path: &Path, text: &str) -> Result<(), ImageError> {
    // A distribution may ship these as links (resolv.conf): replace the link, not its target.
    if path
        .symlink_metadata()
        .is_ok_and(|m| m.file_type().is_symlink())
    {
        std::fs::remove_file(path).map_err(io("remove", path))?;
    }
    std::fs::write(path, text).map_err(io("write", path))?;
    set_mode(path, 0o644)
}

fn set_mode(path: &Path, mode: u32) -> Result<(), ImageError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io("chmod", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_tree_gets_berth_users_and_mount_points() {
        let dir = tempfile::tempdir().unwrap();
        apply(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.path().join("etc/passwd")).unwrap(),
            PASSWD
        );
        let tmp = std::fs::metadata(dir.path().join("tmp")).unwrap();
        assert_eq!(tmp.permissions().mode() & 0o7777, 0o1777);
        assert!(dir.path().join("var/lib/berth").is_dir());
        assert!(dir.path().join("etc/ssl/certs").is_dir());
        assert!(
            dir.path().join(CA_BUNDLE).is_file(),
            "the trust bundle's mount point"
        );
        // Every file the sandbox binds into a box on an image has its mount point.
        for file in [".berth/berth-init", "etc/hosts", CA_BUNDLE] {
            assert!(dir.path().join(file).is_file(), "{file}");
        }
    }

    #[test]
    fn a_distributions_users_are_kept_and_the_box_user_added_once() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir(&etc).unwrap();
        std::fs::write(
            etc.join("passwd"),
            "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/x",
        )
        .unwrap();
        std::fs::write(etc.join("group"), "root:x:0:\nuser:x:1001:\n").unwrap();
        std::os::unix::fs::symlink("/run/elsewhere", etc.join("resolv.conf")).unwrap();
        apply(dir.path()).unwrap();
        apply(dir.path()).unwrap();
        let passwd = std::fs::read_to_string(etc.join("passwd")).unwrap();
        assert_eq!(
            passwd,
            "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/:/x\nuser:x:1001:1001::/home/user:/bin/sh\n"
        );
        assert_eq!(
            std::fs::read_to_string(etc.join("group")).unwrap(),
            "root:x:0:\nuser:x:1001:\n"
        );
        assert!(std::fs::symlink_metadata(etc.join("resolv.conf"))
            .unwrap()
            .is_file());
    }
}
