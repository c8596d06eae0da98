//! `GET /v1/files/archive`: a directory (or one file) as a tar stream, read as the caller.
//!
//! The tree is walked from descriptors (`openat` with `O_NOFOLLOW`), so a symlink is
//! stored as a link and never followed, however it changes during the walk. Names are
//! relative to the directory (its contents); a single file is one entry named by its own
//! name. Sockets, FIFOs and devices are left out. A file that changes size while it is
//! read is cut or zero-padded to the size its header announced, so the stream stays a
//! valid tar.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::dir::{Dir, OwningIter};
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, FileStat, Mode};
use tar::{EntryType, Header};

use crate::error::ApiError;

/// Deepest directory nesting walked (each level holds one open descriptor).
pub const MAX_DEPTH: usize = 256;

/// What `path` named when it was opened.
pub enum Root {
    Dir(Dir),
    File { file: File, name: Vec<u8> },
}

/// Opens `path` (following symlinks in it, as the caller would) as the tree to pack.
pub fn open_root(path: &Path) -> Result<Root, ApiError> {
    let fs_err = |source| ApiError::Fs {
        op: "archive",
        path: path.to_string_lossy().into_owned(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(fs_err)?;
    let meta = file.metadata().map_err(fs_err)?;
    if meta.is_dir() {
        let dir = Dir::from_fd(file.into_raw_fd()).map_err(|e| fs_err(e.into()))?;
        return Ok(Root::Dir(dir));
    }
    if !meta.is_file() {
        return Err(ApiError::NotRegularFile {
            path: path.to_string_lossy().into_owned(),
        });
    }
    let name = path
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_else(|| b"file".to_vec());
    Ok(Root::File { file, name })
}

/// Writes the tar of `root` to `out`.
pub fn pack(root: Root, out: impl Write) -> io::Result<()> {
    let mut builder = tar::Builder::new(out);
    match root {
        Root::File { file, name } => {
            let meta = file.metadata()?;
            append_file(&mut builder, &name, file, &meta_header(&meta))?;
        }
        Root::Dir(dir) => walk(&mut builder, dir)?,
    }
    builder.into_inner()?.flush()
}

fn walk(builder: &mut tar::Builder<impl Write>, root: Dir) -> io::Result<()> {
    // Each level: the open directory's entries, and its name relative to the root.
    let mut stack: Vec<(OwningIter, Vec<u8>)> = vec![(root.into_iter(), Vec::new())];
    while let Some((iter, prefix)) = stack.last_mut() {
        let Some(item) = iter.next() else {
            stack.pop();
            continue;
        };
        let item = item?;
        let name = item.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        let name = OsStr::from_bytes(name).to_owned();
        let dir_fd = iter.as_raw_fd();
        let mut rel = prefix.clone();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name.as_bytes());
        let st = match fstatat(Some(dir_fd), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed since it was listed.
            Err(nix::Error::ENOENT) => continue,
            Err(err) => return Err(err.into()),
        };
        let header = stat_header(&st);
        match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                if stack.len() > MAX_DEPTH {
                    return Err(io::Error::other(format!(
                        "{} is nested more than {MAX_DEPTH} directories deep",
                        String::from_utf8_lossy(&rel)
                    )));
                }
                let mut header = header;
                header.set_entry_type(EntryType::Directory);
                header.set_size(0);
                builder.append_data(&mut header, OsStr::from_bytes(&rel), io::empty())?;
                let child = Dir::openat(
                    Some(dir_fd),
                    name.as_os_str(),
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )?;
                stack.push((child.into_iter(), rel));
            }
            libc::S_IFREG => {
                let fd = match openat(
                    Some(dir_fd),
                    name.as_os_str(),
                    OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                    Mode::empty(),
                ) {
                    Ok(fd) => fd,
                    Err(nix::Error::ENOENT) => continue,
                    Err(err) => return Err(err.into()),
                };
                // SAFETY: openat returned a fresh descriptor that nothing else owns.
                let file = unsafe { File::from_raw_fd(fd) };
                let meta = file.metadata()?;
                // Replaced by something else between the stat and the open.
                if !meta.is_file() {
                    continue;
                }
                append_file(builder, &rel, file, &meta_header(&meta))?;
            }
            libc::S_IFLNK => {
                let target = match nix::fcntl::readlinkat(Some(dir_fd), name.as_os_str()) {
                    Ok(target) => target,
                    Err(nix::Error::ENOENT) => continue,
                    Err(err) => return Err(err.into()),
                };
                let mut header = header;
                header.set_entry_type(EntryType::Symlink);
                header.set_size(0);
                builder.append_link(&mut header, OsStr::from_bytes(&rel), target)?;
            }
            // Sockets, FIFOs, devices.
            _ => {}
        }
    }
    Ok(())
}

fn append_file(
    builder: &mut tar::Builder<impl Write>,
    name: &[u8],
    file: File,
    header: &Header,
) -> io::Result<()> {
    let mut header = header.clone();
    let size = header.size()?;
    header.set_entry_type(EntryType::Regular);
    // Exactly `size` bytes, whatever the file does meanwhile.
    let data = file.take(size).chain(io::repeat(0)).take(size);
    builder.append_data(&mut header, OsStr::from_bytes(name), data)
}

fn stat_header(st: &FileStat) -> Header {
    header(
        st.st_mode,
        st.st_uid,
        st.st_gid,
        u64::try_from(st.st_size).unwrap_or(0),
        st.st_mtime,
    )
}

fn meta_header(meta: &std::fs::Metadata) -> Header {
    header(
        meta.mode(),
        meta.uid(),
        meta.gid(),
        meta.len(),
        meta.mtime(),
    )
}

fn header(mode: u32, uid: u32, gid: u32, size: u64, mtime: i64) -> Header {
    let mut header = Header::new_gnu();
    header.set_mode(mode & 0o7777);
    header.set_uid(uid.into());
    header.set_gid(gid.into());
    header.set_size(size);
    header.set_mtime(u64::try_from(mtime).unwrap_or(0));
    header
}
