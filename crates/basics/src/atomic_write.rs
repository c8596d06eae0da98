//! A file replaced whole or not at all. The new contents go to a temporary file beside it
//! (the same directory, so the rename never crosses a filesystem), which gets its mode, is
//! synced, and is renamed over the path; then the directory is synced so that the rename
//! itself survives a crash. A failure at any step removes the temporary file and leaves
//! the old file as it was.

use std::collections::hash_map::RandomState;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions, Permissions};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Temporary names tried before giving up: another name is only needed when one is taken.
const TEMP_NAME_TRIES: usize = 8;

/// Replaces `path` with `bytes`, mode `mode` (whatever the umask), atomically.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_atomically_with(path, mode, |file| file.write_all(bytes))
}

/// Replaces `path` with what `fill` writes into the (empty, temporary) file, mode `mode`,
/// atomically. An error from `fill` leaves `path` untouched.
pub fn write_atomically_with(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let (dir, name) = split(path)?;
    let (tmp, mut file) = create_temp(dir, name)?;
    let written = fill(&mut file)
        .and_then(|()| file.set_permissions(Permissions::from_mode(mode)))
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(err) = written {
        let _ = fs::remove_file(&tmp);
        return Err(err);
    }
    sync_dir(dir)
}

/// Syncs `dir`, so that the rename in it is on disk. A directory the writer may write but
/// not read (mode `-wx`) cannot be opened to sync; the file itself is then already in
/// place and synced, and the write is not failed after the fact.
fn sync_dir(dir: &Path) -> io::Result<()> {
    match File::open(dir) {
        Ok(dir) => dir.sync_all(),
        Err(err) if err.kind() == io::ErrorKind::PermissionDenied => Ok(()),
        Err(err) => Err(err),
    }
}

/// The directory (`.` for a bare name) and the file name of `path`.
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} does not name a file", path.display()),
        )
    })?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// A new file `.<name>.<random>.tmp` in `dir`, readable by its owner only until it is
/// complete. The name is unguessable and made with `O_EXCL`, so nothing planted there in
/// advance (a symlink, say) is ever written through.
fn create_temp(dir: &Path, name: &OsStr) -> io::Result<(PathBuf, File)> {
    let mut last_err = None;
    for _ in 0..TEMP_NAME_TRIES {
        let mut tmp_name = OsStr::new(".").to_os_string();
        tmp_name.push(name);
        tmp_name.push(format!(".{:016x}.tmp", random_u64()));
        let tmp = dir.join(tmp_name);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => last_err = Some(err),
            Err(err) => return Err(err),
        }
    }
    Err(last_err.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

/// 64 random bits: std seeds each `RandomState` from the OS's randomness.
fn random_u64() -> u64 {
    RandomState::new().build_hasher().finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names_in(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_file_is_created_and_replaced_with_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomically(&path, b"one", 0o640).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        write_atomically(&path, b"two, longer", 0o604).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two, longer");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o604, "the mode asked for, not the umask's");
        assert_eq!(
            names_in(dir.path()),
            ["state.json"],
            "no temporary file is left"
        );
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_intact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        write_atomically(&path, b"old", 0o600).unwrap();
        let err = write_atomically_with(&path, 0o600, |file| {
            file.write_all(b"half of the new")?;
            Err(io::Error::other("the disk filled up"))
        })
        .unwrap_err();
        assert_eq!(err.to_string(), "the disk filled up");
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(
            names_in(dir.path()),
            ["key"],
            "the temporary file is removed"
        );
    }

    #[test]
    fn a_failed_rename_leaves_the_directory_in_place_and_clean() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("taken");
        fs::create_dir(&path).unwrap();
        fs::write(path.join("inside"), b"kept").unwrap();
        assert!(write_atomically(&path, b"new", 0o644).is_err());
        assert_eq!(fs::read(path.join("inside")).unwrap(), b"kept");
        assert_eq!(names_in(dir.path()), ["taken"]);
    }

    #[test]
    fn a_symlink_is_replaced_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("elsewhere");
        fs::write(&target, b"untouched").unwrap();
        let path = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &path).unwrap();
        write_atomically(&path, b"new", 0o644).unwrap();
        assert_eq!(fs::read(&target).unwrap(), b"untouched");
        assert!(!fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(fs::read(&path).unwrap(), b"new");
    }

    #[test]
    fn a_path_without_a_file_name_is_refused() {
        let err = write_atomically(Path::new("/"), b"x", 0o644).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_missing_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no/such/dir/file");
        let err = write_atomically(&path, b"x", 0o644).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }
}
