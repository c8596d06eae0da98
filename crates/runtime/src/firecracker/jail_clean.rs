//! Undoing a jailed boot: the jailer cleans up nothing, so after every stop, every failed
//! start, at `remove` and for a crashed daemon's leftovers at `new`, berth unmounts what it
//! bound into the chroot, removes the jailer's directory, removes the box's cgroups (v1 and
//! v2, in case `--cgroup` settings made the jailer create them) and gives the volume back.

use std::path::{Path, PathBuf};

use crate::error::io;
use crate::RuntimeError;

/// How many times a stack of mounts on one path is unmounted before giving up.
const MAX_UNMOUNTS: usize = 16;

/// What to undo for one box.
#[derive(Debug, Clone)]
pub struct Jail<'a> {
    /// `<chroot base>/<exec name>/<id>`.
    pub jail_dir: &'a Path,
    /// The jailer's parent cgroup (the exec file's name) and the instance id.
    pub cgroup_parent: &'a Path,
    pub instance: &'a str,
    /// Given back to berth's own uid/gid, if it exists.
    pub volume: &'a Path,
}

/// Undoes everything a jailed boot (or its staging) left; nothing there is fine. Never
/// removes a directory while something is still mounted below it.
pub fn unjail(jail: &Jail<'_>) -> Result<(), RuntimeError> {
    unmount_below(jail.jail_dir)?;
    crate::fs::remove_dir_all_if_exists(jail.jail_dir, "remove the jailer's directory")?;
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for dir in cgroup_dirs(&table, jail.cgroup_parent, jail.instance) {
        match std::fs::remove_dir(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io("remove the jailer's cgroup", &dir)(e))
            }
            _ => {}
        }
    }
    give_back(jail.volume)
}

/// The volume back to berth's uid/gid (its mode stays 0600).
fn give_back(volume: &Path) -> Result<(), RuntimeError> {
    if !volume.exists() {
        return Ok(());
    }
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    std::os::unix::fs::chown(volume, Some(uid.as_raw()), Some(gid.as_raw()))
        .map_err(io("give back (chown) the volume", volume))
}

/// Unmounts every mount at or below `dir`, deepest first.
fn unmount_below(dir: &Path) -> Result<(), RuntimeError> {
    for _ in 0..MAX_UNMOUNTS {
        let table = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(io("read", Path::new("/proc/self/mountinfo")))?;
        let mut mounts = mounts_below(&table, dir);
        if mounts.is_empty() {
            return Ok(());
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.as_os_str().len()));
        for mount in mounts {
            unmount(&mount)?;
        }
    }
    Err(RuntimeError::Io {
        action: "unmount everything below (mounts keep coming back)",
        path: dir.to_path_buf(),
        source: std::io::ErrorKind::ResourceBusy.into(),
    })
}

fn unmount(target: &Path) -> Result<(), RuntimeError> {
    use nix::mount::MntFlags;
    match nix::mount::umount2(target, MntFlags::UMOUNT_NOFOLLOW) {
        // EINVAL: no longer a mount point (a mount above it went first).
        Ok(()) | Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => Ok(()),
        // A file still open somewhere (a dying Firecracker): detach it now, the kernel
        // frees it when the last user closes it.
        Err(nix::errno::Errno::EBUSY) => {
            nix::mount::umount2(target, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW)
                .map_err(|e| io("unmount (lazily)", target)(e.into()))
        }
        Err(e) => Err(io("unmount", target)(e.into())),
    }
}

/// The mount points in a `/proc/self/mountinfo` `table` at or below `dir`.
pub fn mounts_below(table: &str, dir: &Path) -> Vec<PathBuf> {
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(unescape(field)))
        .filter(|point| point.starts_with(dir))
        .collect()
}

/// The box's cgroup directories the jailer may have made: `<v1 hierarchy>/<parent>/<id>`
/// for every mounted v1 hierarchy, `<v2 root>/<parent>/<id>` for the unified one.
pub fn cgroup_dirs(table: &str, parent: &Path, instance: &str) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = table
        .lines()
        .filter_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            let fstype = fs.split(' ').next()?;
            let point = mount.split(' ').nth(4)?;
            matches!(fstype, "cgroup" | "cgroup2")
                .then(|| PathBuf::from(unescape(point)).join(parent).join(instance))
        })
        .collect();
    dirs.dedup();
    dirs
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
            std::str::from_utf8(digits)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &str = "\
22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
25 22 0:22 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw
26 22 0:23 / /sys/fs/cgroup/cpu,cpuacct rw shared:10 - cgroup cgroup rw,cpu,cpuacct
27 22 0:24 / /sys/fs/cgroup/memory rw shared:11 - cgroup cgroup rw,memory
40 22 254:0 /d/boxes/bx_a/vm/run /srv/jail/firecracker/bx-a/root/d/boxes/bx_a/vm/run rw shared:1 - ext4 /dev/vda rw
41 22 0:30 /img/root.ext4 /srv/jail/firecracker/bx-a/root/rootfs.img ro shared:1 - tmpfs tmpfs rw
42 22 0:30 / /srv/jail/firecracker/bx-ab/root/with\\040space ro shared:1 - tmpfs tmpfs rw
";

    #[test]
    fn mounts_below_the_jail_dir_only_that_boxes() {
        let got = mounts_below(TABLE, Path::new("/srv/jail/firecracker/bx-a"));
        assert_eq!(
            got,
            [
                PathBuf::from("/srv/jail/firecracker/bx-a/root/d/boxes/bx_a/vm/run"),
                PathBuf::from("/srv/jail/firecracker/bx-a/root/rootfs.img"),
            ]
        );
        // Component-wise: `bx-a` is not a prefix of `bx-ab`; escapes are undone.
        assert_eq!(
            mounts_below(TABLE, Path::new("/srv/jail/firecracker/bx-ab")),
            [PathBuf::from("/srv/jail/firecracker/bx-ab/root/with space")]
        );
    }

    #[test]
    fn cgroup_dirs_cover_every_v1_hierarchy_and_v2() {
        let got = cgroup_dirs(TABLE, Path::new("firecracker"), "bx-a");
        assert_eq!(
            got,
            [
                PathBuf::from("/sys/fs/cgroup/firecracker/bx-a"),
                PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/firecracker/bx-a"),
                PathBuf::from("/sys/fs/cgroup/memory/firecracker/bx-a"),
            ]
        );
    }

    #[test]
    fn unjail_of_nothing_is_fine_and_removes_a_leftover_dir() {
        let dir = tempfile::tempdir().unwrap();
        let jail_dir = dir.path().join("firecracker/bx-a");
        let jail = Jail {
            jail_dir: &jail_dir,
            cgroup_parent: Path::new("berth-test-no-such-parent"),
            instance: "bx-a",
            volume: &dir.path().join("volume.ext4"),
        };
        unjail(&jail).unwrap();
        std::fs::create_dir_all(jail_dir.join("root/dev")).unwrap();
        std::fs::write(jail_dir.join("root/firecracker"), "copy").unwrap();
        unjail(&jail).unwrap();
        assert!(!jail_dir.exists());
    }
}
