//! The `host` template rootfs: a skeleton of empty mount points, the host's top-level
//! `/usr` links, and a minimal `/etc` of berth's own. The host's `/usr` is bound over it
//! read-only at start; the skeleton itself is built once per data dir and shared by every
//! box, read-only.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use crate::error::io;
use crate::fs::{mkdir_all, set_mode};
use crate::RuntimeError;

/// Empty directories the bundle mounts over (and the box's fixed top level).
const MOUNT_POINTS: &[&str] = &[
    "usr",
    "proc",
    "sys",
    "dev",
    "tmp",
    "run",
    "home/user",
    "memory",
    "root",
    ".berth",
    "etc",
    "var/lib/berth",
];

/// Top-level names that merged-/usr hosts make links into `/usr`.
const USR_LINKS: &[&str] = &["bin", "sbin", "lib", "lib64", "lib32", "libx32"];

/// Where the bundle binds berth-init (an empty file in the skeleton).
pub const INIT_PATH: &str = "/.berth/berth-init";

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
user:x:1001:1001::/home/user:/bin/sh\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\nuser:x:1001:\nnogroup:x:65534:\n";
const HOSTS: &str = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
/// The box has no network: no name servers.
const RESOLV_CONF: &str = "# berth: this box has no network of its own\n";
const NSSWITCH: &str = "passwd: files\ngroup: files\nshadow: files\nhosts: files\n";

/// A top-level host directory that is a real directory (not a link into `/usr`): the
/// bundle binds it read-only at the same place.
pub fn host_dirs_to_bind() -> Vec<PathBuf> {
    USR_LINKS
        .iter()
        .map(|name| Path::new("/").join(name))
        .filter(|p| p.symlink_metadata().is_ok_and(|m| m.is_dir()))
        .collect()
}

/// Builds the skeleton at `rootfs` unless it is already there. Atomic: built in a temp
/// directory beside it and renamed into place, so a crash leaves no half skeleton.
pub fn ensure_host_rootfs(rootfs: &Path) -> Result<(), RuntimeError> {
    if rootfs.is_dir() {
        // Skeletons built before the mode was set get it at their next start.
        return ensure_tmp_mode(rootfs);
    }
    let parent = rootfs.parent().expect("the rootfs path has a parent");
    mkdir_all(parent)?;
    let tmp = parent.join(format!(".rootfs.tmp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    build(&tmp)?;
    match std::fs::rename(&tmp, rootfs) {
        Ok(()) => Ok(()),
        // Another start built it first: theirs is as good as ours.
        Err(_) if rootfs.is_dir() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(())
        }
        Err(source) => Err(RuntimeError::Io {
            action: "rename the rootfs skeleton to",
            path: rootfs.into(),
            source,
        }),
    }
}

/// `/tmp` must be world-writable and sticky. runc gives a tmpfs the mode of the directory
/// it is mounted over, whatever its `mode=` option says.
fn ensure_tmp_mode(root: &Path) -> Result<(), RuntimeError> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = root.join("tmp");
    let mode = std::fs::metadata(&tmp)
        .map_err(io("stat", &tmp))?
        .permissions()
        .mode();
    if mode & 0o7777 == 0o1777 {
        return Ok(());
    }
    set_mode(&tmp, 0o1777)
}

fn build(root: &Path) -> Result<(), RuntimeError> {
    mkdir_all(root)?;
    set_mode(root, 0o755)?;
    for dir in MOUNT_POINTS {
        super::mountpoints::ensure(root, dir)?;
    }
    ensure_tmp_mode(root)?;
    for name in USR_LINKS {
        let host = Path::new("/").join(name);
        let Ok(meta) = host.symlink_metadata() else {
            continue;
        };
        let path = root.join(name);
        if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&host).map_err(io("read the link", &host))?;
            symlink(&target, &path).map_err(io("create the link", &path))?;
        } else if meta.is_dir() {
            mkdir_all(&path)?;
        }
    }
    let init = root.join(INIT_PATH.trim_start_matches('/'));
    write(&init, "", 0o755)?;
    let etc = root.join("etc");
    write(&etc.join("passwd"), PASSWD, 0o644)?;
    write(&etc.join("group"), GROUP, 0o644)?;
    write(&etc.join("hosts"), HOSTS, 0o644)?;
    write(&etc.join("resolv.conf"), RESOLV_CONF, 0o644)?;
    write(&etc.join("nsswitch.conf"), NSSWITCH, 0o644)?;
    copy_host_etc(&etc)?;
    Ok(())
}

/// What of the host's `/etc` the host's `/usr` needs to work: the loader cache and the
/// Debian alternatives links (`awk`, `editor`, … point through `/etc/alternatives`).
fn copy_host_etc(etc: &Path) -> Result<(), RuntimeError> {
    let cache = Path::new("/etc/ld.so.cache");
    if cache.is_file() {
        let dest = etc.join("ld.so.cache");
        std::fs::copy(cache, &dest).map_err(io("copy the loader cache to", &dest))?;
        set_mode(&dest, 0o644)?;
    }
    let alternatives = Path::new("/etc/alternatives");
    let Ok(entries) = std::fs::read_dir(alternatives) else {
        return Ok(());
    };
    let dest_dir = etc.join("alternatives");
    mkdir_all(&dest_dir)?;
    for entry in entries.flatten() {
        if let Ok(target) = std::fs::read_link(entry.path()) {
            let dest = dest_dir.join(entry.file_name());
            symlink(&target, &dest).map_err(io("create the link", &dest))?;
        }
    }
    Ok(())
}

fn write(path: &Path, content: &str, mode: u32) -> Result<(), RuntimeError> {
    std::fs::write(path, content).map_err(io("write", path))?;
    set_mode(path, mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skeleton_has_mount_points_links_and_etc_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path().join("templates/host/rootfs");
        ensure_host_rootfs(&rootfs).unwrap();
        for d in MOUNT_POINTS {
            assert!(rootfs.join(d).is_dir(), "{d}");
        }
        let passwd = std::fs::read_to_string(rootfs.join("etc/passwd")).unwrap();
        assert!(passwd.contains("user:x:1001:1001::/home/user:/bin/sh"));
        assert!(rootfs.join(".berth/berth-init").is_file());
        if Path::new("/bin")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
        {
            assert_eq!(
                std::fs::read_link(rootfs.join("bin")).unwrap(),
                std::fs::read_link("/bin").unwrap()
            );
        }
        ensure_host_rootfs(&rootfs).unwrap();
        assert!(!std::fs::read_dir(rootfs.parent().unwrap())
            .unwrap()
            .any(|e| e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".rootfs.tmp")));
    }
}
