//! A box's persistent disk: a sparse ext4 image labelled `berth-vol` holding `home/`
//! (mounted at `/home/user`), `memory/` (at `/memory`, seeded like the sandbox volume) and
//! `agent/` (berth-init's own state, at `/var/lib/berth`).
//!
//! Made with `mkfs.ext4 -d` from a temp dir and owners set with `debugfs`, so nothing is
//! mounted and the builder needs no root. Grown offline only: the box must be stopped.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::confine::{self, Bind};
use crate::error::io;
use crate::ext4::{debugfs_write, make, Journal};
use crate::tool::RESIZE2FS;
use crate::volume_check::{check_guest_written_volume, limits_for, run_e2fsck, IMAGE_INSIDE};
use crate::ImageError;

/// The volume's label (informational: the VM finds disks by virtio serial).
pub const VOLUME_LABEL: &str = "berth-vol";
/// The box user's uid and gid (`berth_protocol::guest::BOX_USER_UID`).
pub const BOX_USER_UID: u32 = 1001;

const MIB: u64 = 1024 * 1024;
/// Below this mkfs cannot fit a journal and the seed.
pub const MIN_VOLUME_MIB: u64 = 16;

/// What [`ensure_volume`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeChange {
    Created,
    Grown { from_mib: u64 },
    Unchanged,
}

/// Creates the volume image at `path` (which must not exist) of `size_mib` MiB, sparse.
pub fn create_volume(path: &Path, size_mib: u64) -> Result<(), ImageError> {
    new_volume(path, size_mib, |scratch, image| {
        let tree = scratch.join("tree");
        seed(&tree)?;
        // As root the seed carries its owners into the image (mkfs -d copies them); else
        // debugfs sets them afterwards (a process more: a few ms per new box).
        let owned = own_seed(&tree)?;
        make(&tree, image, VOLUME_LABEL, Some(size_mib), Journal::Yes)?;
        if owned {
            Ok(())
        } else {
            debugfs_write(image, &owner_commands())
        }
    })
}

/// Makes a new volume at `path`: `build` writes the image at its second argument, in a
/// scratch dir (its first) beside `path`; the image is renamed into place only when whole.
fn new_volume(
    path: &Path,
    size_mib: u64,
    build: impl FnOnce(&Path, &Path) -> Result<(), ImageError>,
) -> Result<(), ImageError> {
    check_size(size_mib)?;
    if path.exists() {
        return Err(ImageError::Io {
            action: "create the volume (it already exists; grow it instead)",
            path: path.into(),
            source: std::io::ErrorKind::AlreadyExists.into(),
        });
    }
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(io("create the directory", parent))?;
    let scratch = tempfile::Builder::new()
        .prefix(".volume-")
        .tempdir_in(parent)
        .map_err(io("create a scratch directory in", parent))?;
    let image = scratch.path().join("volume.ext4");
    build(scratch.path(), &image)?;
    std::fs::rename(&image, path).map_err(io("move the volume to", path))
}

/// Grows the volume at `path` to `size_mib` (the full check of a guest-written image, then
/// `truncate` + `e2fsck -f -p` + `resize2fs`, each confined; offline: the box must be
/// stopped). Never shrinks: a smaller size is an error; the same
/// size does nothing.
pub fn grow_volume(path: &Path, size_mib: u64) -> Result<(), ImageError> {
    let current = std::fs::metadata(path).map_err(io("stat", path))?.len();
    let wanted = size_mib * MIB;
    if wanted < current {
        return Err(ImageError::Shrink {
            path: path.into(),
            current_mib: current / MIB,
            requested_mib: size_mib,
        });
    }
    if wanted == current {
        return Ok(());
    }
    // A guest may have written it: the full read-only check first, so a hostile image is
    // refused before anything writes to it.
    check_guest_written_volume(path)?;
    // resize2fs refuses a file system not checked since it was last mounted.
    let out = run_e2fsck(path, &["-f", "-p"], true)?;
    // 0: clean; 1: errors corrected. Anything else needs a person.
    if !matches!(out.status.code(), Some(0 | 1)) {
        return Err(ImageError::ToolFailed {
            command: format!("e2fsck -f -p {}", path.display()),
            status: out.status,
            stderr: out.report(),
        });
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(io("open", path))?;
    file.set_len(wanted).map_err(io("grow", path))?;
    drop(file);
    let image = confine::inside(IMAGE_INSIDE);
    let out = confine::run(
        RESIZE2FS,
        &[image.as_os_str()],
        &[Bind::writable(path, IMAGE_INSIDE)],
        limits_for(path)?,
    )?;
    if !out.status.success() {
        return Err(ImageError::ToolFailed {
            command: format!("resize2fs {}", path.display()),
            status: out.status,
            stderr: out.report(),
        });
    }
    Ok(())
}

/// Creates the volume when missing, grows it when `size_mib` is larger, and otherwise
/// leaves it alone (a smaller size is an error: volumes never shrink).
pub fn ensure_volume(path: &Path, size_mib: u64) -> Result<VolumeChange, ImageError> {
    ensure_volume_with(path, size_mib, |path| create_volume(path, size_mib))
}

/// [`ensure_volume`] with `create` making a missing volume (e.g. from a spare).
pub(crate) fn ensure_volume_with(
    path: &Path,
    size_mib: u64,
    create: impl FnOnce(&Path) -> Result<(), ImageError>,
) -> Result<VolumeChange, ImageError> {
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            check_size(size_mib)?;
            create(path)?;
            Ok(VolumeChange::Created)
        }
        Err(source) => Err(ImageError::Io {
            action: "stat",
            path: path.into(),
            source,
        }),
        Ok(meta) if meta.len() == size_mib * MIB => Ok(VolumeChange::Unchanged),
        Ok(meta) => {
            grow_volume(path, size_mib)?;
            Ok(VolumeChange::Grown {
                from_mib: meta.len() / MIB,
            })
        }
    }
}

/// Grows the mounted ext4 at `mount` (its loop device already as large as `size_bytes`)
/// to `size_bytes`, online, with the kernel's own `EXT4_IOC_RESIZE_FS`: no host tool
/// parses the image (resize2fs would only make this call after reading the device).
pub fn grow_mounted_volume(mount: &Path, size_bytes: u64) -> Result<(), ImageError> {
    // linux/ext4.h: _IOW('f', 16, __u64).
    const EXT4_IOC_RESIZE_FS: libc::c_ulong = 0x4008_6610;
    let dir = std::fs::File::open(mount).map_err(io("open", mount))?;
    // SAFETY: fstatvfs fills the struct it is given from our open fd.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatvfs(dir.as_raw_fd(), &mut stat) } < 0 {
        return Err(io("stat the file system at", mount)(
            std::io::Error::last_os_error(),
        ));
    }
    let blocks: u64 = size_bytes / stat.f_bsize;
    // SAFETY: the ioctl reads one u64 (the new block count) from the pointer.
    if unsafe { libc::ioctl(dir.as_raw_fd(), EXT4_IOC_RESIZE_FS, &blocks as *const u64) } < 0 {
        return Err(io("grow (EXT4_IOC_RESIZE_FS) the file system at", mount)(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

/// Creates the volume at `path` (which must not exist) of `size_mib` MiB from `tree`,
/// taking its files with their owners, modes, times, links and xattrs as they are (so
/// `tree` must already hold the box's 0-based ids). For volumes made from an older
/// directory volume.
pub fn create_volume_from_dir(tree: &Path, path: &Path, size_mib: u64) -> Result<(), ImageError> {
    new_volume(path, size_mib, |_, image| {
        make(tree, image, VOLUME_LABEL, Some(size_mib), Journal::Yes).map(drop)
    })
}

fn check_size(size_mib: u64) -> Result<(), ImageError> {
    if size_mib < MIN_VOLUME_MIB || size_mib.checked_mul(MIB).is_none() {
        return Err(ImageError::Invalid {
            what: "volume size (MiB)",
            value: size_mib.to_string(),
            why: "at least 16 MiB",
        });
    }
    Ok(())
}

/// The volume's top level with its modes; owners are set after mkfs by [`owner_commands`].
fn seed(tree: &Path) -> Result<(), ImageError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &PathBuf, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).map_err(io("chmod", p))
    };
    let mkdir = |p: &PathBuf, m: u32| {
        std::fs::create_dir_all(p).map_err(io("create the directory", p))?;
        mode(p, m)
    };
    mkdir(&tree.to_path_buf(), 0o755)?;
    mkdir(&tree.join("home"), 0o700)?;
    mkdir(&tree.join("agent"), 0o700)?;
    // Empty: berth-init seeds it on the first boot, from the template's layout.
    mkdir(&tree.join("memory"), 0o755)
}

/// The box user's paths of a fresh volume (relative to its top).
fn user_paths() -> Vec<String> {
    vec!["home".to_string(), "memory".into()]
}

/// Gives the box user its paths of the seed `tree` when this process may (root); `false`
/// when it may not, and nothing was changed.
fn own_seed(tree: &Path) -> Result<bool, ImageError> {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(false);
    }
    for p in user_paths() {
        let path = tree.join(p);
        std::os::unix::fs::lchown(&path, Some(BOX_USER_UID), Some(BOX_USER_UID))
            .map_err(io("chown", &path))?;
    }
    Ok(true)
}

/// debugfs commands giving the box user `home/` and `memory/` with what it holds, and root
/// `agent/` and the top level.
fn owner_commands() -> String {
    let mut cmds = String::new();
    for p in user_paths().iter().map(|p| format!("/{p}")) {
        cmds.push_str(&format!(
            "sif {p} uid {BOX_USER_UID}\nsif {p} gid {BOX_USER_UID}\n"
        ));
    }
    for p in ["/", "/agent"] {
        cmds.push_str(&format!("sif {p} uid 0\nsif {p} gid 0\n"));
    }
    cmds
}
