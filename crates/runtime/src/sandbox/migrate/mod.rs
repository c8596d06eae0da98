//! Moving an older box's directory volume (`<box>/volume/`, owned by the box's *host* ids)
//! into the volume image, once, at its next start.
//!
//! The directory is copied into a host-only staging tree with every owner shifted back to
//! the box's own ids (an id outside the box's range becomes 65534, the overflow id the box
//! saw it as), modes, times, symlinks, hard links (as links), fifos, sockets and `user.*`
//! xattrs kept; `mkfs.ext4 -d` makes the image from it; the image is mounted read-only and
//! compared entry by entry (path, type, mode, shifted owner, size, link target) with the
//! directory itself before it takes its place and the directory is removed. Any failure leaves the directory
//! as it was and removes the staging tree and the unfinished image.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use super::loop_device::attach;
use super::paths::BoxPaths;
use super::volume_error::VolumeError;
use crate::IdMap;

/// The id a box sees for a host id outside its range.
const OVERFLOW_ID: u32 = 65534;
const MIB: u64 = 1 << 20;
/// Room beyond the data (× 1.25): the journal, inode tables and the rest of ext4's own.
const HEADROOM_MIB: u64 = 24;
/// A progress line per this much copied.
const PROGRESS_EVERY: u64 = 256 * MIB;
const STAGING: &str = ".volume-migration";

/// Migrates the box's directory volume into its image when it has one and no image yet.
/// Returns whether it did.
pub fn migrate_if_needed(
    paths: &BoxPaths,
    id_map: IdMap,
    disk_mib: u64,
) -> Result<bool, VolumeError> {
    let dir = paths.legacy_volume_dir();
    let image = paths.volume_image();
    if !dir.is_dir() {
        return Ok(false);
    }
    if image.exists() {
        // Either a migration whose removal of the directory failed, or an image another
        // runtime made without looking at the directory: data berth cannot tell is in the
        // image is never deleted.
        tracing::warn!(dir = %dir.display(), image = %image.display(), "a directory volume next to the volume image is left alone: remove it by hand once its files are known to be in the image");
        return Ok(false);
    }
    let staging = paths.dir().join(STAGING);
    remove_dir(&staging)?;
    let result = migrate(&dir, &image, &staging, id_map, disk_mib);
    let cleanup = remove_dir(&staging);
    result?;
    cleanup?;
    Ok(true)
}

fn migrate(
    dir: &Path,
    image: &Path,
    staging: &Path,
    id_map: IdMap,
    disk_mib: u64,
) -> Result<(), VolumeError> {
    mkdir(staging, 0o700)?;
    let tree = staging.join("tree");
    let mut copy = Copy {
        id_map,
        links: HashMap::new(),
        copied: 0,
        reported: 0,
        total: tree_bytes(dir)?,
        dir: dir.to_path_buf(),
    };
    tracing::info!(dir = %dir.display(), total_mib = copy.total / MIB, "migrating a directory volume into an image");
    copy.entry(dir, &tree)?;
    // What the image must hold: the directory itself, as the box saw it.
    let entries = describe_tree(dir, &|id| shift(id_map, id))?;
    let needed = copy.total.div_ceil(MIB) + copy.total.div_ceil(MIB) / 4 + HEADROOM_MIB;
    let size_mib = disk_mib.max(needed).max(berth_image::MIN_VOLUME_MIB);
    if size_mib > disk_mib {
        tracing::warn!(dir = %dir.display(), disk_mib, size_mib, "the directory volume holds more than the box's disk size: its image is larger");
    }
    let made = staging.join(super::paths::VOLUME_IMAGE_NAME);
    berth_image::create_volume_from_dir(&tree, &made, size_mib).map_err(|source| {
        VolumeError::Image {
            action: "make the volume image from the directory volume into",
            image: made.clone(),
            source,
        }
    })?;
    verify(dir, &made, staging, &entries)?;
    std::fs::rename(&made, image).map_err(|source| VolumeError::Io {
        action: "move the migrated volume to",
        path: image.into(),
        source,
    })?;
    tracing::info!(dir = %dir.display(), image = %image.display(), entries = entries.len(), size_mib, "directory volume migrated; removing the directory");
    remove_dir(dir)
}

/// Mounts `image` read-only (no idmap: the on-disk ids) and compares it with `expected`,
/// the directory volume's description with its ids shifted.
fn verify(
    dir: &Path,
    image: &Path,
    staging: &Path,
    expected: &[String],
) -> Result<(), VolumeError> {
    let check = staging.join("check");
    mkdir(&check, 0o700)?;
    let device = attach(image)?;
    let flags = nix::mount::MsFlags::MS_RDONLY
        | nix::mount::MsFlags::MS_NOSUID
        | nix::mount::MsFlags::MS_NODEV
        | nix::mount::MsFlags::MS_NOEXEC;
    nix::mount::mount(
        Some(&device.path()),
        &check,
        Some("ext4"),
        flags,
        None::<&str>,
    )
    .map_err(|e| VolumeError::Mount {
        device: device.path(),
        target: check.clone(),
        step: "mount (read-only, to verify)",
        kernel_says: None,
        source: e.into(),
    })?;
    drop(device);
    let found = describe_tree(&check, &|id| id);
    let unmounted = super::idmap_mount::unmount(&check);
    let mut found = found?;
    unmounted?;
    // mke2fs adds lost+found.
    found.retain(|e| !e.starts_with("lost+found "));
    if found != expected {
        let first = found
            .iter()
            .zip(expected)
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("first difference: {a:?} vs {b:?}"))
            .unwrap_or_default();
        return Err(VolumeError::MigrationMismatch {
            dir: dir.into(),
            image: image.into(),
            expected: format!("{} entries", expected.len()),
            found: format!("{} entries ({first})", found.len()),
        });
    }
    Ok(())
}

struct Copy {
    id_map: IdMap,
    /// (dev, ino) of a multiply-linked file → its first copy.
    links: HashMap<(u64, u64), PathBuf>,
    copied: u64,
    reported: u64,
    total: u64,
    dir: PathBuf,
}

impl Copy {
    /// Copies `from` (not following a link) to `to`, recursively, with shifted owners.
    fn entry(&mut self, from: &Path, to: &Path) -> Result<(), VolumeError> {
        let meta = std::fs::symlink_metadata(from).map_err(io("stat", from))?;
        let kind = meta.file_type();
        if !kind.is_dir() && meta.nlink() > 1 {
            if let Some(first) = self.links.get(&(meta.dev(), meta.ino())) {
                return std::fs::hard_link(first, to).map_err(io("hard-link", to));
            }
            self.links
                .insert((meta.dev(), meta.ino()), to.to_path_buf());
        }
        if kind.is_dir() {
            std::fs::create_dir(to).map_err(io("create the directory", to))?;
            let mut names: Vec<_> = std::fs::read_dir(from)
                .map_err(io("read the directory", from))?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()
                .map_err(io("read the directory", from))?;
            names.sort();
            for name in names {
                self.entry(&from.join(&name), &to.join(&name))?;
            }
        } else if kind.is_file() {
            self.file(from, to, meta.len())?;
        } else if kind.is_symlink() {
            let target = std::fs::read_link(from).map_err(io("read the link", from))?;
            std::os::unix::fs::symlink(&target, to).map_err(io("create the link", to))?;
        } else if kind.is_fifo()
            || kind.is_socket()
            || kind.is_char_device()
            || kind.is_block_device()
        {
            let mode = meta.mode() & libc::S_IFMT;
            nix::sys::stat::mknod(
                to,
                nix::sys::stat::SFlag::from_bits_truncate(mode),
                nix::sys::stat::Mode::empty(),
                meta.rdev(),
            )
            .map_err(|e| io("create the node", to)(e.into()))?;
        } else {
            return Err(VolumeError::Unmigratable {
                path: from.into(),
                why: "an unknown file type",
            });
        }
        self.attributes(from, to, &meta)
    }

    fn file(&mut self, from: &Path, to: &Path, len: u64) -> Result<(), VolumeError> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut src = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(from)
            .map_err(io("open", from))?;
        let mut dst = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(to)
            .map_err(io("create", to))?;
        std::io::copy(&mut src, &mut dst).map_err(io("copy", from))?;
        self.copied += len;
        if self.copied - self.reported >= PROGRESS_EVERY {
            self.reported = self.copied;
            tracing::info!(dir = %self.dir.display(), copied_mib = self.copied / MIB, total_mib = self.total / MIB, "migrating a directory volume");
        }
        Ok(())
    }

    /// Owner (shifted), then mode (a chown clears set-id bits), xattrs, times.
    fn attributes(
        &self,
        from: &Path,
        to: &Path,
        meta: &std::fs::Metadata,
    ) -> Result<(), VolumeError> {
        let (uid, gid) = (self.shift(meta.uid()), self.shift(meta.gid()));
        std::os::unix::fs::lchown(to, Some(uid), Some(gid)).map_err(io("chown", to))?;
        if !meta.file_type().is_symlink() {
            std::fs::set_permissions(
                to,
                std::os::unix::fs::PermissionsExt::from_mode(meta.mode() & 0o7777),
            )
            .map_err(io("chmod", to))?;
        }
        copy_user_xattrs(from, to)?;
        let times = [
            nix::sys::time::TimeSpec::new(meta.atime(), meta.atime_nsec()),
            nix::sys::time::TimeSpec::new(meta.mtime(), meta.mtime_nsec()),
        ];
        nix::sys::stat::utimensat(
            None,
            to,
            &times[0],
            &times[1],
            nix::sys::stat::UtimensatFlags::NoFollowSymlink,
        )
        .map_err(|e| io("set the times of", to)(e.into()))
    }

    fn shift(&self, host: u32) -> u32 {
        shift(self.id_map, host)
    }
}

/// The id the box saw for host id `host`.
fn shift(id_map: IdMap, host: u32) -> u32 {
    match host.checked_sub(id_map.host_base) {
        Some(id) if id < IdMap::SIZE => id,
        _ => OVERFLOW_ID,
    }
}

/// Copies the `user.*` xattrs (the ones a box process can set on its files; `security.*`
/// and ACLs would carry host ids and are left out, with a log line).
fn copy_user_xattrs(from: &Path, to: &Path) -> Result<(), VolumeError> {
    let from_c = CString::new(from.as_os_str().as_bytes()).expect("a path has no NUL");
    let to_c = CString::new(to.as_os_str().as_bytes()).expect("a path has no NUL");
    let mut names = vec![0u8; 4096];
    // SAFETY: llistxattr writes at most `names.len()` bytes into `names`.
    let n = unsafe { libc::llistxattr(from_c.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if n < 0 {
        let err = std::io::Error::last_os_error();
        return match err.raw_os_error() {
            Some(libc::ENOTSUP) => Ok(()),
            _ => Err(io("list the xattrs of", from)(err)),
        };
    }
    for name in names[..n as usize]
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
    {
        if !name.starts_with(b"user.") {
            tracing::warn!(path = %from.display(), xattr = %String::from_utf8_lossy(name), "not migrated: only user.* xattrs are");
            continue;
        }
        let name_c = CString::new(name).expect("split at NUL");
        let mut value = vec![0u8; 65536];
        // SAFETY: lgetxattr writes at most `value.len()` bytes into `value`.
        let len = unsafe {
            libc::lgetxattr(
                from_c.as_ptr(),
                name_c.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        if len < 0 {
            return Err(io("read an xattr of", from)(std::io::Error::last_os_error()));
        }
        // SAFETY: lsetxattr reads `len` bytes of `value`.
        let rc = unsafe {
            libc::lsetxattr(
                to_c.as_ptr(),
                name_c.as_ptr(),
                value.as_ptr().cast(),
                len as usize,
                0,
            )
        };
        if rc < 0 {
            return Err(io("write an xattr of", to)(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// One line per entry under `root`, sorted: path, type and mode, owner (through `id`),
/// size or link target. What the directory volume and the image must agree on.
fn describe_tree(root: &Path, id: &dyn Fn(u32) -> u32) -> Result<Vec<String>, VolumeError> {
    let mut out = Vec::new();
    describe(root, Path::new(""), id, &mut out)?;
    out.sort();
    Ok(out)
}

fn describe(
    root: &Path,
    rel: &Path,
    id: &dyn Fn(u32) -> u32,
    out: &mut Vec<String>,
) -> Result<(), VolumeError> {
    let dir = root.join(rel);
    for entry in std::fs::read_dir(&dir).map_err(io("read the directory", &dir))? {
        let entry = entry.map_err(io("read the directory", &dir))?;
        let rel = rel.join(entry.file_name());
        let path = root.join(&rel);
        let meta = std::fs::symlink_metadata(&path).map_err(io("stat", &path))?;
        let detail = if meta.is_file() {
            meta.len().to_string()
        } else if meta.file_type().is_symlink() {
            std::fs::read_link(&path)
                .map_err(io("read the link", &path))?
                .display()
                .to_string()
        } else {
            String::new()
        };
        out.push(format!(
            "{} {:o} {}:{} {detail}",
            rel.display(),
            meta.mode(),
            id(meta.uid()),
            id(meta.gid())
        ));
        if meta.is_dir() {
            describe(root, &rel, id, out)?;
        }
    }
    Ok(())
}

/// Bytes of the regular files under `dir` (for the progress lines and the image's size).
fn tree_bytes(dir: &Path) -> Result<u64, VolumeError> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(io("read the directory", dir))? {
        let entry = entry.map_err(io("read the directory", dir))?;
        let meta = std::fs::symlink_metadata(entry.path()).map_err(io("stat", &entry.path()))?;
        if meta.is_dir() {
            total += tree_bytes(&entry.path())? + 4096;
        } else {
            total += meta.len().div_ceil(4096) * 4096;
        }
    }
    Ok(total)
}

fn mkdir(path: &Path, mode: u32) -> Result<(), VolumeError> {
    std::fs::create_dir(path).map_err(io("create the directory", path))?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
        .map_err(io("chmod", path))
}

fn remove_dir(path: &Path) -> Result<(), VolumeError> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", path)(e)),
        _ => Ok(()),
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> VolumeError {
    let path = path.to_path_buf();
    move |source| VolumeError::Io {
        action,
        path,
        source,
    }
}

#[cfg(test)]
mod tests;
