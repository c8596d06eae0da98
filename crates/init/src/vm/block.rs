//! The VM's virtio block devices as sysfs shows them (`/sys/block/vdX/{dev,serial,ro}`),
//! and their device nodes. The sysfs and `/dev` roots are parameters so tests can use a
//! fake tree.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// One `vdX` disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDev {
    /// `vda`, `vdb`, …
    pub name: String,
    /// The virtio serial the host gave the drive; `None` when the VMM sets none
    /// (Firecracker) or the driver does not show it.
    pub serial: Option<String>,
    /// Attached read-only by the host (the guest cannot change this at boot: nothing but
    /// PID 1 runs yet).
    pub ro: bool,
    /// Major and minor device number, from `dev` (`254:16`).
    pub devno: (u32, u32),
}

/// Every `vd*` disk under `sys_block` (`/sys/block`), in the kernel's naming order. A disk whose `dev`
/// file is missing or unreadable is still appearing and is left out.
pub fn scan(sys_block: &Path) -> io::Result<Vec<BlockDev>> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(sys_block) {
        Ok(entries) => entries,
        // No /sys/block yet (or no block driver at all): no disks yet.
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(err) => return Err(err),
    };
    for entry in entries {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !name.starts_with("vd") {
            continue;
        }
        let dir = entry.path();
        let Some(devno) = read_attr(&dir, "dev").as_deref().and_then(parse_devno) else {
            continue;
        };
        found.push(BlockDev {
            serial: read_attr(&dir, "serial").filter(|s| !s.is_empty()),
            ro: read_attr(&dir, "ro").as_deref() == Some("1"),
            devno,
            name,
        });
    }
    // Kernel order: vdz comes before vdaa.
    found.sort_unstable_by(|a, b| (a.name.len(), &a.name).cmp(&(b.name.len(), &b.name)));
    Ok(found)
}

fn read_attr(dir: &Path, attr: &str) -> Option<String> {
    std::fs::read_to_string(dir.join(attr))
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `"254:16"` → `(254, 16)`.
pub fn parse_devno(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The device node of `dev` under `dev_dir` (`/dev`). devtmpfs makes it; if it is not
/// there (no devtmpfs, or not yet), it is made here, root-only.
pub fn device_node(dev_dir: &Path, dev: &BlockDev) -> io::Result<PathBuf> {
    let path = dev_dir.join(&dev.name);
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_block_device() || meta.file_type().is_file() => {
            // A regular file only ever appears in tests' fake trees.
            return Ok(path);
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} exists but is not a block device", path.display()),
            ))
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    let devno = nix::sys::stat::makedev(u64::from(dev.devno.0), u64::from(dev.devno.1));
    nix::sys::stat::mknod(
        &path,
        nix::sys::stat::SFlag::S_IFBLK,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        devno,
    )
    .map_err(io::Error::from)?;
    Ok(path)
}

#[cfg(test)]
pub mod fake {
    //! A fake `/sys/block` and `/dev` for tests.
    use std::path::Path;

    /// Adds disk `name` with the given serial, ro flag and contents.
    pub fn disk(sys: &Path, dev: &Path, name: &str, serial: Option<&str>, ro: bool, data: &[u8]) {
        let dir = sys.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let minor = (name.as_bytes()[2] - b'a') as u32 * 16;
        std::fs::write(dir.join("dev"), format!("254:{minor}\n")).unwrap();
        std::fs::write(dir.join("ro"), if ro { "1\n" } else { "0\n" }).unwrap();
        if let Some(serial) = serial {
            std::fs::write(dir.join("serial"), format!("{serial}\n")).unwrap();
        }
        std::fs::write(dev.join(name), data).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disks_are_read_from_sysfs_sorted_and_incomplete_ones_skipped() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        assert!(scan(&sys.path().join("absent")).unwrap().is_empty());
        fake::disk(sys.path(), dev.path(), "vdb", Some("berth-vol"), false, b"");
        fake::disk(sys.path(), dev.path(), "vda", Some("berth-root"), true, b"");
        fake::disk(sys.path(), dev.path(), "vdc", None, true, b"");
        fake::disk(sys.path(), dev.path(), "vdaa", None, true, b"");
        std::fs::create_dir(sys.path().join("vdd")).unwrap(); // no `dev` yet
        std::fs::create_dir(sys.path().join("loop0")).unwrap();
        let disks = scan(sys.path()).unwrap();
        let names: Vec<_> = disks.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["vda", "vdb", "vdc", "vdaa"]);
        assert_eq!(disks[0].serial.as_deref(), Some("berth-root"));
        assert!(disks[0].ro && !disks[1].ro);
        assert_eq!(disks[1].devno, (254, 16));
        assert_eq!(disks[2].serial, None);
        assert_eq!(
            device_node(dev.path(), &disks[0]).unwrap(),
            dev.path().join("vda")
        );
        std::fs::create_dir(dev.path().join("vdx")).unwrap();
        let odd = BlockDev {
            name: "vdx".into(),
            ..disks[0].clone()
        };
        assert!(device_node(dev.path(), &odd).is_err());
    }

    #[test]
    fn device_numbers_parse_strictly() {
        assert_eq!(parse_devno("254:0\n"), Some((254, 0)));
        assert_eq!(parse_devno("254"), None);
        assert_eq!(parse_devno("a:1"), None);
        assert_eq!(parse_devno("1:-1"), None);
    }
}
