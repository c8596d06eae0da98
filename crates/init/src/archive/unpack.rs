//! `PUT /v1/files/archive`: a tar stream extracted into a directory, as the caller.
//!
//! The archive is read in raw mode, one header at a time, so its extension records (GNU
//! long names, PAX) are read with a bound instead of whole; every entry is resolved from
//! the target's descriptor ([`super::beneath`]). Refused: absolute names, `..`, symlinks
//! whose target leaves the target directory, hard links whose source is outside it, and
//! any path through a symlink (one in the archive or one already in the box). Entries up
//! to a refused one are kept (like tar); nothing is ever written outside the target.
//!
//! Kept: file contents, modes (the box user's lose setuid/setgid), file mtimes. Owners
//! are the caller's, whatever the archive says. Devices, FIFOs and sockets are skipped.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use berth_protocol::files::ArchiveWritten;
use berth_protocol::guest::BoxUser;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fchmod, futimens, Mode};
use nix::sys::time::TimeSpec;
use tar::EntryType;

use super::beneath::{self, components, link_stays_inside};
use crate::error::ApiError;

/// Largest GNU long-name or PAX record read: a path is at most 4096 bytes.
const MAX_EXTENSION_BYTES: u64 = 64 * 1024;
/// Directories whose mode lacks owner rwx get it while their contents are written, and
/// their own mode at the end; at most this many are remembered.
const MAX_DEFERRED_DIRS: usize = 65_536;

/// Names carried by extension records for the next entry.
#[derive(Default)]
struct Pending {
    name: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
}

/// Extracts the tar read from `input` into `target` (made, with parents, if missing).
pub fn unpack(target: &Path, user: BoxUser, input: impl Read) -> Result<ArchiveWritten, ApiError> {
    let fs_err = |source| ApiError::Fs {
        op: "extract into",
        path: target.to_string_lossy().into_owned(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .create(target)
        .map_err(fs_err)?;
    let root = File::open(target).map_err(fs_err)?;
    if !root.metadata().map_err(fs_err)?.is_dir() {
        return Err(fs_err(io::Error::from_raw_os_error(libc::ENOTDIR)));
    }
    let root = OwnedFd::from(root);
    let mut unpacker = Unpacker {
        root,
        user,
        written: ArchiveWritten::default(),
        deferred: Vec::new(),
    };
    let mut archive = tar::Archive::new(input);
    let entries = archive.entries().map_err(ApiError::BadArchive)?.raw(true);
    let mut pending = Pending::default();
    for entry in entries {
        let mut entry = entry.map_err(ApiError::BadArchive)?;
        let kind = entry.header().entry_type();
        match kind {
            EntryType::GNULongName => pending.name = Some(gnu_long(&mut entry)?),
            EntryType::GNULongLink => pending.link = Some(gnu_long(&mut entry)?),
            EntryType::XHeader => {
                let data = read_extension(&mut entry)?;
                pax(&data, &mut pending)?;
            }
            EntryType::XGlobalHeader => drop(read_extension(&mut entry)?),
            _ => {
                let name = pending
                    .name
                    .take()
                    .unwrap_or_else(|| entry.path_bytes().into_owned());
                let link = pending
                    .link
                    .take()
                    .or_else(|| entry.link_name_bytes().map(|l| l.into_owned()));
                unpacker.entry(kind, &name, link.as_deref(), &mut entry)?;
            }
        }
    }
    unpacker.finish()?;
    Ok(unpacker.written)
}

fn read_extension(entry: &mut impl Read) -> Result<Vec<u8>, ApiError> {
    let mut data = Vec::new();
    entry
        .take(MAX_EXTENSION_BYTES + 1)
        .read_to_end(&mut data)
        .map_err(ApiError::BadArchive)?;
    if data.len() as u64 > MAX_EXTENSION_BYTES {
        return Err(ApiError::UnsupportedEntry {
            entry: String::from_utf8_lossy(&data[..64]).into_owned(),
            reason: "has an extension record over 64 KiB",
        });
    }
    Ok(data)
}

/// A GNU long name or link record: the name, which GNU tar ends with a NUL.
fn gnu_long(entry: &mut impl Read) -> Result<Vec<u8>, ApiError> {
    let mut data = read_extension(entry)?;
    while data.last() == Some(&0) {
        data.pop();
    }
    Ok(data)
}

/// The PAX keys that matter here: `path`, `linkpath`; a `size` (which this raw reader
/// cannot honour) is refused rather than misread.
fn pax(data: &[u8], pending: &mut Pending) -> Result<(), ApiError> {
    for ext in tar::PaxExtensions::new(data) {
        let ext = ext.map_err(ApiError::BadArchive)?;
        match ext.key_bytes() {
            b"path" => pending.name = Some(ext.value_bytes().to_vec()),
            b"linkpath" => pending.link = Some(ext.value_bytes().to_vec()),
            b"size" | b"GNU.sparse.size" | b"GNU.sparse.map" => {
                return Err(ApiError::UnsupportedEntry {
                    entry: String::from_utf8_lossy(ext.key_bytes()).into_owned(),
                    reason: "PAX sizes and sparse files are not supported",
                })
            }
            _ => {}
        }
    }
    Ok(())
}

struct Unpacker {
    root: OwnedFd,
    user: BoxUser,
    written: ArchiveWritten,
    /// (components, mode) of directories whose mode is applied at the end.
    deferred: Vec<(Vec<std::ffi::OsString>, u32)>,
}

impl Unpacker {
    fn entry<R: Read>(
        &mut self,
        kind: EntryType,
        name: &[u8],
        link: Option<&[u8]>,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<(), ApiError> {
        let shown = || String::from_utf8_lossy(name).into_owned();
        let unsafe_entry = |reason| ApiError::UnsafeEntry {
            entry: shown(),
            reason,
        };
        let parts = match components(name) {
            Ok(parts) => parts,
            // The archive's own `./` entry: the target itself.
            Err(beneath::EMPTY) if kind == EntryType::Directory => return Ok(()),
            Err(reason) => return Err(unsafe_entry(reason)),
        };
        let fs = |source: io::Error| match source.raw_os_error() {
            Some(libc::ELOOP) => unsafe_entry(beneath::THROUGH_LINK),
            _ => ApiError::Fs {
                op: "extract",
                path: shown(),
                source,
            },
        };
        let mode = self.mode(entry.header().mode().unwrap_or(0o644));
        let mtime = entry.header().mtime().unwrap_or(0);
        let (dirs, last) = parts.split_at(parts.len() - 1);
        let last = last[0];
        match kind {
            EntryType::Directory => {
                let dir = beneath::open_dir(&self.root, &parts, true).map_err(fs)?;
                self.dir_mode(&dir, &parts, mode).map_err(fs)?;
                self.written.dirs += 1;
            }
            EntryType::Regular | EntryType::Continuous => {
                let parent = beneath::open_dir(&self.root, dirs, true).map_err(fs)?;
                let bytes = write_file(&parent, last, entry, mode, mtime).map_err(fs)?;
                self.written.files += 1;
                self.written.bytes += bytes;
            }
            EntryType::Symlink => {
                let target = link.ok_or_else(|| unsafe_entry(beneath::EMPTY))?;
                link_stays_inside(dirs.len(), target).map_err(unsafe_entry)?;
                let parent = beneath::open_dir(&self.root, dirs, true).map_err(fs)?;
                beneath::clear_for_file(parent.as_raw_fd(), last).map_err(fs)?;
                nix::unistd::symlinkat(OsStr::from_bytes(target), Some(parent.as_raw_fd()), last)
                    .map_err(|e| fs(e.into()))?;
                self.written.links += 1;
            }
            EntryType::Link => {
                let source = link.ok_or_else(|| unsafe_entry(beneath::EMPTY))?;
                let source = components(source).map_err(|reason| ApiError::UnsafeEntry {
                    entry: format!(
                        "{} (hard link to {})",
                        shown(),
                        String::from_utf8_lossy(source)
                    ),
                    reason,
                })?;
                let (source_dirs, source_last) = source.split_at(source.len() - 1);
                let source_parent =
                    beneath::open_dir(&self.root, source_dirs, false).map_err(fs)?;
                let parent = beneath::open_dir(&self.root, dirs, true).map_err(fs)?;
                beneath::clear_for_file(parent.as_raw_fd(), last).map_err(fs)?;
                // No AT_SYMLINK_FOLLOW: a link to a symlink links the symlink itself.
                nix::unistd::linkat(
                    Some(source_parent.as_raw_fd()),
                    source_last[0],
                    Some(parent.as_raw_fd()),
                    last,
                    nix::fcntl::AtFlags::empty(),
                )
                .map_err(|e| fs(e.into()))?;
                self.written.links += 1;
            }
            EntryType::GNUSparse => {
                return Err(ApiError::UnsupportedEntry {
                    entry: shown(),
                    reason: "sparse files are not supported",
                })
            }
            // Devices, FIFOs and anything newer: skipped, as the archives berth makes
            // never hold them.
            _ => {}
        }
        Ok(())
    }

    /// The permission bits kept: all of them for box root, none of setuid/setgid for the
    /// box user.
    fn mode(&self, header: u32) -> u32 {
        match self.user {
            BoxUser::Root => header & 0o7777,
            BoxUser::User => header & 0o1777,
        }
    }

    /// Sets a directory's mode now, or (when it lacks owner rwx, which would stop its own
    /// contents from being written) gives it owner rwx and its mode at the end.
    fn dir_mode(&mut self, dir: &OwnedFd, parts: &[&OsStr], mode: u32) -> io::Result<()> {
        if mode & 0o700 == 0o700 {
            return Ok(fchmod(dir.as_raw_fd(), Mode::from_bits_truncate(mode))?);
        }
        if self.deferred.len() >= MAX_DEFERRED_DIRS {
            return Err(io::Error::from_raw_os_error(libc::E2BIG));
        }
        fchmod(dir.as_raw_fd(), Mode::from_bits_truncate(mode | 0o700))?;
        self.deferred
            .push((parts.iter().map(|p| p.to_os_string()).collect(), mode));
        Ok(())
    }

    /// Applies the deferred directory modes, deepest first (a parent that loses its `x`
    /// would hide its children).
    fn finish(&mut self) -> Result<(), ApiError> {
        self.deferred
            .sort_by_key(|(parts, _)| std::cmp::Reverse(parts.len()));
        for (parts, mode) in std::mem::take(&mut self.deferred) {
            let refs: Vec<&OsStr> = parts.iter().map(|p| p.as_os_str()).collect();
            let result = beneath::open_dir(&self.root, &refs, false)
                .and_then(|dir| Ok(fchmod(dir.as_raw_fd(), Mode::from_bits_truncate(mode))?));
            result.map_err(|source| ApiError::Fs {
                op: "set the mode of",
                path: Path::new("")
                    .join(parts.iter().collect::<std::path::PathBuf>())
                    .to_string_lossy()
                    .into_owned(),
                source,
            })?;
        }
        Ok(())
    }
}

/// Writes one file under `parent` (replacing a non-directory there, never through a
/// symlink); returns its size.
fn write_file(
    parent: &OwnedFd,
    name: &OsStr,
    data: &mut impl Read,
    mode: u32,
    mtime: u64,
) -> io::Result<u64> {
    beneath::clear_for_file(parent.as_raw_fd(), name)?;
    let fd = openat(
        Some(parent.as_raw_fd()),
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )?;
    // SAFETY: openat returned a fresh descriptor that nothing else owns.
    let mut file = unsafe { File::from_raw_fd(fd) };
    let bytes = io::copy(data, &mut file)?;
    fchmod(file.as_raw_fd(), Mode::from_bits_truncate(mode))?;
    let secs = i64::try_from(mtime).unwrap_or(i64::MAX);
    let mtime = TimeSpec::new(secs, 0);
    futimens(file.as_raw_fd(), &TimeSpec::UTIME_OMIT, &mtime)?;
    Ok(bytes)
}
