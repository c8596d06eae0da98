//! The bridge's two listening sockets.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tokio::net::UnixListener;

/// Listens on `path`, mode 0600, replacing whatever stale socket a previous bridge of the
/// same box left (a restore starts a new bridge on the same paths). The socket is bound
/// under a temporary name and renamed into place, so `path` appears only once it listens
/// with its final mode: the runtime can wait for it to exist, and nobody else gets in.
pub fn listen_private(path: &Path) -> io::Result<UnixListener> {
    let tmp = temporary_name(path)?;
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(&tmp)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
    std::fs::rename(&tmp, path)?;
    Ok(listener)
}

/// `<dir>/.<name>.tmp` beside `path`.
fn temporary_name(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(".tmp");
    Ok(path.with_file_name(tmp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    #[tokio::test]
    async fn listens_private_and_replaces_a_stale_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serial.sock");
        let first = listen_private(&path).unwrap();
        drop(first);
        let again = listen_private(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(!dir.path().join(".serial.sock.tmp").exists());
        let _client = tokio::net::UnixStream::connect(&path).await.unwrap();
        again.accept().await.unwrap();
    }

    #[test]
    fn a_path_without_a_file_name_is_refused() {
        assert!(listen_private(Path::new("/")).is_err());
    }
}
