//! Paths inside an extraction's target, resolved one component at a time from the
//! target's own file descriptor with `O_NOFOLLOW`: no symlink, whether it came with the
//! archive or was already in the box, is ever followed, so nothing lands outside.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{mkdirat, Mode};

/// Why an entry's name or link target was refused.
pub const ABSOLUTE: &str = "is an absolute path";
pub const PARENT: &str = "has a `..` component";
pub const EMPTY: &str = "names nothing";
pub const ESCAPES: &str = "is a symlink whose target leaves the target directory";
pub const THROUGH_LINK: &str = "passes through a symlink";

/// The components of an entry name, relative to the target: `.` and empty ones dropped;
/// absolute names and any `..` refused.
pub fn components(name: &[u8]) -> Result<Vec<&OsStr>, &'static str> {
    if name.first() == Some(&b'/') {
        return Err(ABSOLUTE);
    }
    let mut out = Vec::new();
    for part in name.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => return Err(PARENT),
            _ => out.push(OsStr::from_bytes(part)),
        }
    }
    if out.is_empty() {
        return Err(EMPTY);
    }
    Ok(out)
}

/// Checks that a symlink at `depth` directories below the target (0: directly in it),
/// pointing at `target`, resolves inside the target, judged by its text alone (what it
/// points through is never followed by the extraction itself).
pub fn link_stays_inside(depth: usize, target: &[u8]) -> Result<(), &'static str> {
    if target.is_empty() {
        return Err(EMPTY);
    }
    if target.first() == Some(&b'/') {
        return Err(ESCAPES);
    }
    let mut level = depth as i64;
    for part in target.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                level -= 1;
                if level < 0 {
                    return Err(ESCAPES);
                }
            }
            _ => level += 1,
        }
    }
    Ok(())
}

/// A directory opened under the target. A component that is a symlink fails with `ELOOP`;
/// with `create`, a missing one is made (mode 0755).
pub fn open_dir(root: &OwnedFd, dirs: &[&OsStr], create: bool) -> io::Result<OwnedFd> {
    let mut current = root.try_clone()?;
    for name in dirs {
        current = open_child_dir(current.as_raw_fd(), name, create)?;
    }
    Ok(current)
}

fn open_child_dir(parent: RawFd, name: &OsStr, create: bool) -> io::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let open = || openat(Some(parent), name, flags, Mode::empty());
    let fd = match open() {
        Err(nix::Error::ENOENT) if create => {
            match mkdirat(Some(parent), name, Mode::from_bits_truncate(0o755)) {
                Ok(()) | Err(nix::Error::EEXIST) => {}
                Err(err) => return Err(err.into()),
            }
            open()?
        }
        // O_NOFOLLOW|O_DIRECTORY on a symlink: ENOTDIR on some kernels, ELOOP on others.
        Err(nix::Error::ENOTDIR) if is_symlink(parent, name) => {
            return Err(io::Error::from_raw_os_error(libc::ELOOP))
        }
        other => other?,
    };
    // SAFETY: openat returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// What is at `name` in `parent`, without following a symlink.
pub fn lstat_at(parent: RawFd, name: &OsStr) -> io::Result<Option<libc::mode_t>> {
    match nix::sys::stat::fstatat(Some(parent), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st.st_mode & libc::S_IFMT)),
        Err(nix::Error::ENOENT) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

fn is_symlink(parent: RawFd, name: &OsStr) -> bool {
    matches!(lstat_at(parent, name), Ok(Some(libc::S_IFLNK)))
}

/// Makes room for a new non-directory at `name`: whatever non-directory is there (a file,
/// a symlink: never followed) is unlinked, as tar does; a directory there is an error.
pub fn clear_for_file(parent: RawFd, name: &OsStr) -> io::Result<()> {
    match lstat_at(parent, name)? {
        None => Ok(()),
        Some(libc::S_IFDIR) => Err(io::Error::from_raw_os_error(libc::EISDIR)),
        Some(_) => Ok(nix::unistd::unlinkat(
            Some(parent),
            name,
            nix::unistd::UnlinkatFlags::NoRemoveDir,
        )?),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_relative_and_never_climb() {
        assert_eq!(components(b"./a//b/").unwrap(), ["a", "b"]);
        assert_eq!(components(b"/etc/x"), Err(ABSOLUTE));
        assert_eq!(components(b"a/../../x"), Err(PARENT));
        assert_eq!(components(b"a/.."), Err(PARENT));
        assert_eq!(components(b"./"), Err(EMPTY));
    }

    #[test]
    fn link_targets_are_judged_from_the_links_depth() {
        assert!(link_stays_inside(0, b"a/b").is_ok());
        assert!(link_stays_inside(1, b"../c").is_ok());
        assert!(link_stays_inside(1, b"..").is_ok());
        assert_eq!(link_stays_inside(0, b"../x"), Err(ESCAPES));
        assert_eq!(link_stays_inside(1, b"a/../../../x"), Err(ESCAPES));
        assert_eq!(link_stays_inside(2, b"/etc"), Err(ESCAPES));
        assert_eq!(link_stays_inside(0, b""), Err(EMPTY));
    }
}
