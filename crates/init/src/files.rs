//! The `files` calls: read, atomic write, list, stat, mkdir, remove.
//!
//! Every operation runs on a blocking thread under an [`FsIdentity`] guard: as the box
//! user (the default) the thread's fsuid/fsgid become 1001, which also drops that
//! thread's DAC-override capabilities, so the kernel checks permissions exactly as for a
//! user process; root-owned files stay protected. It also lowers `CAP_SYS_RESOURCE`, so
//! the user's writes cannot spend the blocks the volume keeps for root
//! ([`crate::thread_caps`]). The guard restores both on drop, so a reused pool thread
//! never keeps the user's identity.
//!
//! `stat` and the entries of `list` use `lstat` (a symlink is reported as a symlink); the
//! directory named by `list` itself is followed, like `ls dir/`.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use berth_protocol::guest::{
    BoxUser, FileEntry, FileKind, FileList, FileQuery, BOX_USER_UID, MAX_FILE_BYTES,
};
use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};

use crate::account_names::AccountNames;
use crate::error::ApiError;
use crate::thread_caps;

/// The thread's filesystem identity for one operation.
pub struct FsIdentity {
    switched: bool,
    /// `CAP_SYS_RESOURCE` was lowered and is raised again on drop.
    lowered_resource: bool,
}

impl FsIdentity {
    pub fn enter(user: BoxUser) -> Self {
        if user == BoxUser::Root {
            return FsIdentity {
                switched: false,
                lowered_resource: false,
            };
        }
        // SAFETY: setfsgid/setfsuid change only this thread's filesystem ids.
        unsafe {
            libc::setfsgid(BOX_USER_UID);
            libc::setfsuid(BOX_USER_UID);
        }
        // Only fails for a bad header, which is fixed; then the thread keeps the capability
        // (a sandbox's berth-init has none to lose).
        let lowered_resource = thread_caps::lower(thread_caps::CAP_SYS_RESOURCE).unwrap_or(false);
        FsIdentity {
            switched: true,
            lowered_resource,
        }
    }
}

impl Drop for FsIdentity {
    fn drop(&mut self) {
        if self.lowered_resource {
            if let Err(err) = thread_caps::raise(thread_caps::CAP_SYS_RESOURCE) {
                eprintln!("berth-init: cannot raise CAP_SYS_RESOURCE again: {err}");
            }
        }
        if self.switched {
            // SAFETY: as above; back to root, which restores the thread's fs capabilities.
            unsafe {
                libc::setfsuid(0);
                libc::setfsgid(0);
            }
        }
    }
}

/// Runs `op` on a blocking thread as `user`.
pub async fn run_as<T: Send + 'static>(
    user: BoxUser,
    op: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(move || {
        let _identity = FsIdentity::enter(user);
        op()
    })
    .await
    .map_err(|_| ApiError::Worker)?
}

fn fs_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> ApiError + 'a {
    move |source| ApiError::Fs {
        op,
        path: path.to_string_lossy().into_owned(),
        source,
    }
}

/// A file opened for reading: its size when it was opened, and its bytes as they are read.
pub struct FileRead {
    /// Exactly this many bytes are sent (announced as `Content-Length`): a file that grows
    /// is cut here; one that shrinks ends short, which the HTTP layer reports as an error.
    pub len: u64,
    pub chunks: mpsc::Receiver<Bytes>,
}

/// Opens a regular file for reading as `user`, then streams it through the returned
/// channel, at most the size it had when opened.
pub async fn read(q: FileQuery) -> Result<FileRead, ApiError> {
    let (opened_tx, opened_rx) = oneshot::channel();
    let (tx, rx) = mpsc::channel(4);
    tokio::task::spawn_blocking(move || {
        let path = PathBuf::from(&q.path);
        let opened = {
            let _identity = FsIdentity::enter(q.user);
            open_for_read(&path)
        };
        let (mut file, len) = match opened {
            Ok(opened) => opened,
            Err(err) => return drop(opened_tx.send(Err(err))),
        };
        if opened_tx.send(Ok(len)).is_err() {
            return;
        }
        let mut buf = vec![0u8; 64 * 1024];
        let mut left = len;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            match file.read(&mut buf[..want]) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    left -= n as u64;
                    if tx.blocking_send(Bytes::copy_from_slice(&buf[..n])).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let len = opened_rx.await.map_err(|_| ApiError::Worker)??;
    Ok(FileRead { len, chunks: rx })
}

/// Opens `path` (following symlinks, as the box user would) and checks it is a regular
/// file of at most [`MAX_FILE_BYTES`]; returns it with its size.
fn open_for_read(path: &Path) -> Result<(File, u64), ApiError> {
    let not_regular = || ApiError::NotRegularFile {
        path: path.to_string_lossy().into_owned(),
    };
    // O_NONBLOCK: opening a FIFO that has no writer returns at once instead of blocking
    // this thread forever; the type check below refuses it. O_NOCTTY: opening a terminal
    // never makes it ours. A regular file ignores both.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|err| match err.raw_os_error() {
            // What open(2) says of a Unix socket.
            Some(libc::ENXIO) => not_regular(),
            _ => fs_err("read", path)(err),
        })?;
    let meta = file.metadata().map_err(fs_err("read", path))?;
    if meta.is_dir() {
        return Err(fs_err("read", path)(std::io::Error::from_raw_os_error(
            libc::EISDIR,
        )));
    }
    // A device (`/dev/zero` never ends), a FIFO or a socket has no size to stop at.
    if !meta.is_file() {
        return Err(not_regular());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(ApiError::TooLarge {
            limit_bytes: MAX_FILE_BYTES,
        });
    }
    Ok((file, meta.len()))
}

/// A piece of a file being written; `End` commits it.
pub enum Chunk {
    Data(Bytes),
    End,
}

/// Writes `path` atomically as `user` from the chunks received: a temporary file in the
/// same directory, fsync, rename. Without `End` (the body failed) the temp file is removed.
pub fn write_atomic(q: &FileQuery, mut chunks: mpsc::Receiver<Chunk>) -> Result<(), ApiError> {
    let path = Path::new(&q.path);
    if path.file_name().is_none() {
        return Err(fs_err("write", path)(std::io::Error::from_raw_os_error(
            libc::EISDIR,
        )));
    }
    let mode = q.mode.map(|m| m & 0o7777).unwrap_or_else(|| {
        fs::metadata(path)
            .map(|m| m.permissions().mode() & 0o7777)
            .unwrap_or(0o644)
    });
    berth_basics::write_atomically_with(path, mode, |file| loop {
        match chunks.blocking_recv() {
            Some(Chunk::Data(data)) => file.write_all(&data)?,
            Some(Chunk::End) => return Ok(()),
            None => return Err(std::io::Error::from_raw_os_error(libc::ECANCELED)),
        }
    })
    .map_err(fs_err("write", path))
}

/// Writes `path` in place as `user` from the chunks received: opened (made with `mode`, or
/// 0o644), truncated, written, as envd does; not synced, as envd does not (the volume is
/// synced when the box stops). Without `End` (the body failed) the file keeps what came.
pub fn write_in_place(q: &FileQuery, mut chunks: mpsc::Receiver<Chunk>) -> Result<(), ApiError> {
    let path = Path::new(&q.path);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(q.mode.map_or(0o644, |m| m & 0o7777))
        .open(path)
        .map_err(fs_err("write", path))?;
    loop {
        match chunks.blocking_recv() {
            Some(Chunk::Data(data)) => file.write_all(&data).map_err(fs_err("write", path))?,
            Some(Chunk::End) => return Ok(()),
            None => {
                return Err(fs_err("write", path)(std::io::Error::from_raw_os_error(
                    libc::ECANCELED,
                )))
            }
        }
    }
}

/// `path`'s entry from its lstat metadata: a symlink's target is read from `path`.
fn entry(name: String, path: &Path, meta: &fs::Metadata, names: &AccountNames) -> FileEntry {
    let ft = meta.file_type();
    let kind = if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    };
    FileEntry {
        name,
        kind,
        size: meta.len(),
        mode: meta.mode() & 0o7777,
        mtime: meta.mtime(),
        owner: Some(names.user(meta.uid())),
        group: Some(names.group(meta.gid())),
        symlink_target: ft
            .is_symlink()
            .then(|| fs::read_link(path).ok())
            .flatten()
            .map(|target| target.to_string_lossy().into_owned()),
    }
}

pub fn stat(path: &Path) -> Result<FileEntry, ApiError> {
    let meta = fs::symlink_metadata(path).map_err(fs_err("stat", path))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "/".into());
    Ok(entry(name, path, &meta, &AccountNames::load()))
}

pub fn list(path: &Path) -> Result<FileList, ApiError> {
    let mut entries = Vec::new();
    let names = AccountNames::load();
    for item in fs::read_dir(path).map_err(fs_err("list", path))? {
        let item = item.map_err(fs_err("list", path))?;
        // An entry removed while listing is skipped.
        let item_path = item.path();
        if let Ok(meta) = fs::symlink_metadata(&item_path) {
            let name = item.file_name().to_string_lossy().into_owned();
            entries.push(entry(name, &item_path, &meta, &names));
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(FileList { entries })
}

pub fn mkdir(path: &Path, parents: bool) -> Result<(), ApiError> {
    fs::DirBuilder::new()
        .recursive(parents)
        .mode(0o755)
        .create(path)
        .map_err(fs_err("mkdir", path))
}

/// `POST /v1/files/move`: rename(2) `from` to `to`; answers `to`'s entry.
pub fn rename(from: &Path, to: &Path) -> Result<FileEntry, ApiError> {
    if from.parent().is_none() || to.parent().is_none() {
        return Err(ApiError::MoveRoot);
    }
    fs::rename(from, to).map_err(fs_err("move", from))?;
    stat(to)
}

pub fn remove(path: &Path, recursive: bool) -> Result<(), ApiError> {
    if path.parent().is_none() {
        return Err(ApiError::RemoveRoot);
    }
    let meta = fs::symlink_metadata(path).map_err(fs_err("remove", path))?;
    let result = match (meta.is_dir(), recursive) {
        (true, true) => fs::remove_dir_all(path),
        (true, false) => fs::remove_dir(path),
        (false, _) => fs::remove_file(path),
    };
    result.map_err(fs_err("remove", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(path: &Path) -> FileQuery {
        FileQuery {
            path: path.to_string_lossy().into_owned(),
            user: BoxUser::Root,
            ..Default::default()
        }
    }

    #[test]
    fn write_is_atomic_and_keeps_an_existing_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.sh");
        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Chunk::Data(Bytes::from_static(b"echo ")))
            .unwrap();
        tx.try_send(Chunk::Data(Bytes::from_static(b"hi"))).unwrap();
        tx.try_send(Chunk::End).unwrap();
        write_atomic(
            &FileQuery {
                mode: Some(0o755),
                ..q(&path)
            },
            rx,
        )
        .unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"echo hi");
        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Chunk::Data(Bytes::from_static(b"x"))).unwrap();
        tx.try_send(Chunk::End).unwrap();
        write_atomic(&q(&path), rx).unwrap();
        assert_eq!(stat(&path).unwrap().mode, 0o755);
        // An aborted write leaves the old content and no temp file.
        let (tx, rx) = mpsc::channel(4);
        tx.try_send(Chunk::Data(Bytes::from_static(b"partial")))
            .unwrap();
        drop(tx);
        assert!(write_atomic(&q(&path), rx).is_err());
        assert_eq!(fs::read(&path).unwrap(), b"x");
        assert_eq!(list(dir.path()).unwrap().entries.len(), 1);
    }

    async fn read_all(path: &Path) -> Result<(u64, Vec<u8>), ApiError> {
        let mut read = read(q(path)).await?;
        let mut bytes = Vec::new();
        while let Some(chunk) = read.chunks.recv().await {
            bytes.extend_from_slice(&chunk);
        }
        Ok((read.len, bytes))
    }

    #[tokio::test]
    async fn only_regular_files_are_read_and_never_past_their_size_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let socket = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for path in [Path::new("/dev/zero"), &fifo, &link, &socket] {
            let err = read_all(path).await.expect_err("refused");
            assert_eq!(
                err.code(),
                berth_protocol::ErrorCode::NotARegularFile,
                "{path:?}: {err}"
            );
        }
        let file = dir.path().join("file");
        fs::write(&file, b"12345").unwrap();
        assert_eq!(read_all(&file).await.unwrap(), (5, b"12345".to_vec()));
    }

    #[tokio::test]
    async fn a_file_that_grows_is_cut_at_its_size_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grow");
        fs::write(&path, vec![b'a'; 200 * 1024]).unwrap();
        let mut read = read(q(&path)).await.unwrap();
        assert_eq!(read.len, 200 * 1024);
        // The reader has sent at most a few chunks (the channel holds 4); grow the file.
        let mut file = OpenOptions::new().append(true).open(&path).unwrap();
        file.write_all(&vec![b'b'; 1024 * 1024]).unwrap();
        let mut total = 0;
        while let Some(chunk) = read.chunks.recv().await {
            total += chunk.len();
        }
        assert_eq!(total, 200 * 1024);
    }

    #[test]
    fn list_stat_mkdir_remove() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b");
        assert!(matches!(mkdir(&nested, false), Err(ApiError::Fs { .. })));
        mkdir(&nested, true).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("link")).unwrap();
        let names: Vec<_> = list(dir.path())
            .unwrap()
            .entries
            .into_iter()
            .map(|e| (e.name, e.kind))
            .collect();
        assert_eq!(
            names,
            [
                ("a".to_owned(), FileKind::Dir),
                ("link".to_owned(), FileKind::Symlink)
            ]
        );
        assert_eq!(
            stat(&dir.path().join("link")).unwrap().kind,
            FileKind::Symlink
        );
        let err = remove(&dir.path().join("a"), false).unwrap_err();
        assert_eq!(err.code(), berth_protocol::ErrorCode::NotEmpty);
        remove(&dir.path().join("a"), true).unwrap();
        assert_eq!(
            remove(&dir.path().join("a"), true).unwrap_err().code(),
            berth_protocol::ErrorCode::NotFound
        );
        assert!(matches!(
            remove(Path::new("/"), true),
            Err(ApiError::RemoveRoot)
        ));
    }

    #[test]
    fn a_move_renames_and_answers_the_new_entry_with_its_link_target() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/somewhere", dir.path().join("l")).unwrap();
        let moved = rename(&dir.path().join("l"), &dir.path().join("m")).unwrap();
        assert_eq!((moved.name.as_str(), moved.kind), ("m", FileKind::Symlink));
        assert_eq!(moved.symlink_target.as_deref(), Some("/somewhere"));
        assert!(moved.owner.is_some() && moved.group.is_some());
        let gone = rename(&dir.path().join("l"), &dir.path().join("n")).unwrap_err();
        assert_eq!(gone.code(), berth_protocol::ErrorCode::NotFound);
        assert!(matches!(
            rename(Path::new("/"), &dir.path().join("x")),
            Err(ApiError::MoveRoot)
        ));
    }
}
