//! Small file-system steps both backends take, each failing as [`RuntimeError::Io`] naming
//! what was done to which path.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::error::io;
use crate::RuntimeError;

pub(crate) fn mkdir_all(path: &Path) -> Result<(), RuntimeError> {
    std::fs::create_dir_all(path).map_err(io("create the directory", path))
}

pub(crate) fn set_mode(path: &Path, mode: u32) -> Result<(), RuntimeError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(io("chmod", path))
}

/// Removes the file (or socket, or link) at `path`; nothing there is fine.
pub(crate) fn remove_if_exists(path: &Path) -> Result<(), RuntimeError> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", path)(e)),
        _ => Ok(()),
    }
}

/// Removes the directory tree at `path`; nothing there is fine.
pub(crate) fn remove_dir_all_if_exists(
    path: &Path,
    action: &'static str,
) -> Result<(), RuntimeError> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(action, path)(e)),
        _ => Ok(()),
    }
}
