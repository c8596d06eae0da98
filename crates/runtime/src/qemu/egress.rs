//! The host end of a VM's egress channel: the Unix listener vhost-device-vsock delivers
//! the guest's connections to host port 2025 to (`<vm>/vsock.sock_2025`), bound before
//! QEMU starts so the first connection of the boot already finds it.

use super::paths::VmPaths;
use super::process::io;
pub(super) use crate::fs::{remove_if_exists, set_mode};
use crate::{EgressListener, RuntimeError};

/// Binds (or binds again, for a running box after a daemon restart) the egress listener:
/// 0600 in the 0700 VM dir, so only host root (and vhost-device-vsock, running as it)
/// reaches it. Nothing of the box can write the VM dir, so binding by path is safe.
pub fn bind(paths: &VmPaths) -> Result<EgressListener, RuntimeError> {
    let path = paths.egress_socket();
    remove_if_exists(&path)?;
    let listener = std::os::unix::net::UnixListener::bind(&path)
        .map_err(io("bind the egress socket", &path))?;
    set_mode(&path, 0o600)?;
    listener
        .set_nonblocking(true)
        .map_err(io("set the egress socket non-blocking", &path))?;
    EgressListener::from_std(listener).map_err(io("register the egress socket", &path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    #[tokio::test]
    async fn binds_private_replaces_a_stale_socket_and_rebinds() {
        let dir = tempfile::tempdir().unwrap();
        let paths = VmPaths::at(dir.path());
        std::fs::create_dir_all(paths.vm_dir()).unwrap();
        std::fs::write(paths.egress_socket(), "stale").unwrap();
        let first = bind(&paths).unwrap();
        let meta = std::fs::symlink_metadata(paths.egress_socket()).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        drop(first);
        let again = bind(&paths).unwrap();
        let _client = tokio::net::UnixStream::connect(paths.egress_socket())
            .await
            .unwrap();
        again.accept().await.unwrap();
    }
}
