//! The host end of a VM's egress channel: the Unix listener the VMM delivers the guest's
//! connections to host port 2025 to (`<sockets dir>/vsock.sock_2025`), bound before the VM
//! starts so the first connection of the boot already finds it.

use std::path::Path;

use crate::error::io;
pub(crate) use crate::fs::{remove_if_exists, set_mode};
use crate::{EgressListener, RuntimeError};

/// Binds (or binds again, for a running box after a daemon restart) the egress listener at
/// `path`: 0600, owned by `owner` (the uid and gid of the jailed VMM process that connects
/// to it) or host root, in a directory only those reach. Nothing of the box can write that
/// directory, so binding by path is safe.
pub fn bind(path: &Path, owner: Option<(u32, u32)>) -> Result<EgressListener, RuntimeError> {
    remove_if_exists(path)?;
    let listener =
        std::os::unix::net::UnixListener::bind(path).map_err(io("bind the egress socket", path))?;
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(io("chown", path))?;
    }
    set_mode(path, 0o600)?;
    listener
        .set_nonblocking(true)
        .map_err(io("set the egress socket non-blocking", path))?;
    EgressListener::from_std(listener).map_err(io("register the egress socket", path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    #[tokio::test]
    async fn binds_private_replaces_a_stale_socket_and_rebinds() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("vsock.sock_2025");
        std::fs::write(&socket, "stale").unwrap();
        let first = bind(&socket, None).unwrap();
        let meta = std::fs::symlink_metadata(&socket).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        drop(first);
        let again = bind(&socket, Some((4242, 4343))).unwrap();
        let meta = std::fs::symlink_metadata(&socket).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!((meta.uid(), meta.gid()), (4242, 4343));
        let _client = tokio::net::UnixStream::connect(&socket).await.unwrap();
        again.accept().await.unwrap();
    }
}
