//! The box's container cgroup, delegated to its berth-init.
//!
//! The container's cgroup (`/berth/<id>`, made by the OCI runtime with the bundle's
//! resources) holds the box's limits plus a reserve for berth-init ([`PIDS_RESERVE`],
//! [`MEMORY_RESERVE_MIB`]). Before the runtime starts, the host makes that directory in each
//! hierarchy that holds a limit (cgroup2, or the v1 `pids` and `memory` ones), hands it to
//! box root the way cgroup2 delegates a subtree (the directory and its `cgroup.procs`,
//! `cgroup.subtree_control` and `cgroup.threads`; the limit files stay host root's), and
//! opens it; the descriptors reach berth-init through the runtime (`--preserve-fds`), and
//! berth-init makes the box's own cgroup in each with the box's limits and stays outside it
//! (berth-init's `sandbox_cgroup`). The box itself sees its cgroups only read-only.
//!
//! Box root owning the directory lets it make cgroups under its own: all of them inside the
//! container's limits, which only host root can change.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::{BoxSpec, RuntimeError};

/// Processes berth-init may have beyond the box's `limits.pids`: its own threads and each
/// process it starts until that process moves into the box's cgroup.
pub const PIDS_RESERVE: u64 = 64;
/// Memory berth-init may use beyond the box's `limits.memory_mib`.
pub const MEMORY_RESERVE_MIB: u64 = 64;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// The v1 hierarchies that hold a box limit.
const V1_CONTROLLERS: &[&str] = &["pids", "memory"];
/// What cgroup2 delegation hands over besides the directory.
const V2_DELEGATED_FILES: &[&str] = &["cgroup.procs", "cgroup.subtree_control", "cgroup.threads"];

/// A box's limit with berth-init's reserve on top; 0 (no limit) stays 0.
pub fn with_reserve(limit: u64, reserve: u64) -> u64 {
    if limit == 0 {
        0
    } else {
        limit.saturating_add(reserve)
    }
}

/// The container cgroup's directory in each hierarchy that holds a limit, made, delegated
/// to box root and opened (close-on-exec: the runtime passes them on by number).
pub fn delegate(spec: &BoxSpec, cgroups_path: &Path) -> Result<Vec<OwnedFd>, RuntimeError> {
    let rel = cgroups_path.strip_prefix("/").unwrap_or(cgroups_path);
    let (dirs, v2) = hierarchies()?;
    let owner = nix::unistd::Uid::from_raw(spec.id_map.host_base);
    let group = nix::unistd::Gid::from_raw(spec.id_map.host_base);
    dirs.iter()
        .map(|mount| {
            let dir = mount.join(rel);
            remove_children(&dir);
            crate::fs::mkdir_all(&dir)?;
            let mut owned = vec![dir.clone()];
            if v2 {
                owned.extend(V2_DELEGATED_FILES.iter().map(|f| dir.join(f)));
            }
            for path in owned.iter().filter(|p| p.exists()) {
                nix::unistd::chown(path, Some(owner), Some(group)).map_err(|e| {
                    RuntimeError::Io {
                        action: "delegate to box root the cgroup",
                        path: path.clone(),
                        source: e.into(),
                    }
                })?;
            }
            std::fs::File::open(&dir)
                .map(OwnedFd::from)
                .map_err(|source| RuntimeError::Io {
                    action: "open the cgroup",
                    path: dir,
                    source,
                })
        })
        .collect()
}

/// Where the hierarchies that hold a box limit are mounted, and whether that is cgroup2.
fn hierarchies() -> Result<(Vec<PathBuf>, bool), RuntimeError> {
    let root = Path::new(CGROUP_ROOT);
    let is_v2 = nix::sys::statfs::statfs(root)
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
    if is_v2 {
        return Ok((vec![root.to_path_buf()], true));
    }
    let table =
        std::fs::read_to_string("/proc/self/mountinfo").map_err(|source| RuntimeError::Io {
            action: "read",
            path: "/proc/self/mountinfo".into(),
            source,
        })?;
    Ok((v1_mounts(&table), false))
}

/// The mount points of the v1 `pids` and `memory` hierarchies in a mountinfo table.
fn v1_mounts(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut right = right.split_whitespace();
            let (fstype, _source, options) = (right.next()?, right.next()?, right.next()?);
            let mount_point = left.split_whitespace().nth(4)?;
            let holds_limit = options.split(',').any(|o| V1_CONTROLLERS.contains(&o));
            (fstype == "cgroup" && holds_limit).then(|| PathBuf::from(mount_point))
        })
        .collect()
}

/// Empty child cgroups a previous boot of the box left (a daemon that died before the
/// runtime removed them): cgroup2 would not let the runtime put berth-init beside them.
fn remove_children(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_children(&entry.path());
            let _ = std::fs::remove_dir(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_added_to_a_limit_and_no_limit_stays_none() {
        assert_eq!(with_reserve(64, PIDS_RESERVE), 128);
        assert_eq!(with_reserve(0, PIDS_RESERVE), 0);
        assert_eq!(with_reserve(u64::MAX, 1), u64::MAX);
    }

    #[test]
    fn v1_mounts_are_the_pids_and_memory_hierarchies() {
        let table = "\
35 25 0:30 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
38 25 0:33 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory
42 25 0:37 / /sys/fs/cgroup/pids rw,relatime shared:16 - cgroup cgroup rw,pids
44 25 0:39 / /sys/fs/cgroup/unified rw,relatime shared:18 - cgroup2 cgroup2 rw
45 25 0:40 / /sys/fs/cgroup/systemd rw,relatime shared:19 - cgroup cgroup rw,name=systemd";
        assert_eq!(
            v1_mounts(table),
            [
                PathBuf::from("/sys/fs/cgroup/memory"),
                PathBuf::from("/sys/fs/cgroup/pids")
            ]
        );
    }

    #[test]
    fn leftover_children_are_removed_and_the_directory_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("box/nested")).unwrap();
        std::fs::create_dir(dir.path().join("init")).unwrap();
        remove_children(dir.path());
        assert!(dir.path().is_dir());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
