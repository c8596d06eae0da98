//! Holding a running sandbox's volume still for a consistent copy: `FIFREEZE` on its mount
//! in the host flushes every dirty page and journal transaction into the image and blocks
//! new writes (the box's writers wait, nothing fails) until `FITHAW`.
//!
//! Only ever on the box's own mount: a freeze of whatever file system the mount point's
//! directory sits on (the host's, were the volume not mounted) would stop the host's
//! writers, so the mount point must be a different device from its parent.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `_IOWR('X', 119, int)` and `_IOWR('X', 120, int)`.
const FIFREEZE: libc::c_ulong = 0xC004_5877;
const FITHAW: libc::c_ulong = 0xC004_5878;

/// Freezes the file system mounted at `mount`; an error when nothing is mounted there.
pub fn freeze(mount: &Path) -> io::Result<()> {
    let dir = mounted(mount)?;
    // SAFETY: ioctl(2) FIFREEZE on a descriptor this function owns; the argument is unused.
    if unsafe { libc::ioctl(dir.as_raw_fd(), FIFREEZE, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Thaws the file system mounted at `mount`; Ok when it was not frozen or nothing is
/// mounted there.
pub fn thaw(mount: &Path) -> io::Result<()> {
    let dir = match mounted(mount) {
        Ok(dir) => dir,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    // SAFETY: ioctl(2) FITHAW on a descriptor this function owns; the argument is unused.
    if unsafe { libc::ioctl(dir.as_raw_fd(), FITHAW, 0) } != 0 {
        let err = io::Error::last_os_error();
        // EINVAL: it was not frozen.
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(err);
        }
    }
    Ok(())
}

/// `mount`, opened, when a file system other than its parent's is mounted on it.
fn mounted(mount: &Path) -> io::Result<File> {
    let dir = File::open(mount)?;
    let parent = mount.parent().unwrap_or(Path::new("/"));
    if dir.metadata()?.dev() == std::fs::metadata(parent)?.dev() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("nothing is mounted on {}", mount.display()),
        ));
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_that_is_not_a_mount_is_never_frozen() {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let err = freeze(&mnt).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        thaw(&mnt).unwrap();
    }
}
