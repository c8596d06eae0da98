//! The box's side of egress in a sandbox: the host end of its egress channel (a Unix socket
//! in the run dir that berth-init connects to once per outbound connection), and the two
//! files bound read-only over the shared rootfs: `/etc/hosts` with the pinned names and the
//! trust bundle with the box's CA.

use std::io::Write;
use std::os::unix::fs::{chown, OpenOptionsExt};
use std::path::Path;

use berth_protocol::guest::EGRESS_SOCKET;

use super::paths::BoxPaths;
use crate::error::io;
use crate::fs::remove_if_exists;
use crate::fs::{mkdir_all, set_mode};
use crate::{guest_etc, EgressListener, EgressSetup, IdMap, RuntimeError};

/// Binds the egress socket and moves it into the run dir, owned by the box's root (mode
/// 0600: berth-init connects as box root; box users cannot reach the run dir at all).
///
/// The socket is made in a host-only directory and renamed into place: the run dir is
/// writable by the box's root, so a chown or chmod by path there could be raced onto a
/// planted link. `rename` replaces whatever is at the destination without following it.
pub fn bind(paths: &BoxPaths, id_map: IdMap) -> Result<EgressListener, RuntimeError> {
    let private = paths.egress_bind_dir();
    mkdir_all(&private)?;
    set_mode(&private, 0o700)?;
    let staged = private.join(EGRESS_SOCKET);
    remove_if_exists(&staged)?;
    let listener = std::os::unix::net::UnixListener::bind(&staged)
        .map_err(io("bind the egress socket", &staged))?;
    let root = id_map.host_id(0);
    chown(&staged, Some(root), Some(root)).map_err(io("chown", &staged))?;
    set_mode(&staged, 0o600)?;
    let dest = paths.egress_socket();
    std::fs::rename(&staged, &dest).map_err(io("move the egress socket to", &dest))?;
    listener
        .set_nonblocking(true)
        .map_err(io("set the egress socket non-blocking", &dest))?;
    EgressListener::from_std(listener).map_err(io("register the egress socket", &dest))
}

/// Writes the box's `/etc/hosts` and trust bundle into its host-owned `etc` dir (bound
/// read-only into the box). Each file is replaced whole, atomically.
pub fn write_etc(paths: &BoxPaths, setup: &EgressSetup) -> Result<(), RuntimeError> {
    let dir = paths.etc_dir();
    mkdir_all(&dir)?;
    set_mode(&dir, 0o755)?;
    write_atomic(
        &paths.hosts_file(),
        guest_etc::hosts(&setup.pinned_hosts)?.as_bytes(),
    )?;
    let bundle = guest_etc::ca_bundle(setup)?;
    write_atomic(&paths.ca_bundle(), &bundle)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RuntimeError> {
    let tmp = path.with_extension("tmp");
    remove_if_exists(&tmp)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .map_err(io("create", &tmp))?;
    file.write_all(bytes).map_err(io("write", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io("rename into place", path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::paths::Layout;

    #[test]
    fn trust_bundle_is_the_host_cas_plus_the_box_ca() {
        let dir = tempfile::tempdir().unwrap();
        let id = berth_protocol::BoxId::from_random([2; 20]);
        let paths = Layout::new(dir.path()).box_paths(&id);
        let pem = "-----BEGIN CERTIFICATE-----\nQkVSVEgtVEVTVC1DQQ==\n-----END CERTIFICATE-----\n";
        let setup = EgressSetup {
            pinned_hosts: vec!["a.test".into()],
            ca_pem: Some(pem.into()),
        };
        write_etc(&paths, &setup).unwrap();
        let bundle = std::fs::read_to_string(paths.ca_bundle()).unwrap();
        assert!(bundle.ends_with(pem));
        let host = std::fs::read_to_string(guest_etc::HOST_CA_BUNDLE).unwrap_or_default();
        assert!(bundle.starts_with(&host));
        // Rewritten whole at the next start: no CA, no pin.
        write_etc(&paths, &EgressSetup::default()).unwrap();
        assert!(!std::fs::read_to_string(paths.ca_bundle())
            .unwrap()
            .contains(pem));
        assert!(!std::fs::read_to_string(paths.hosts_file())
            .unwrap()
            .contains("a.test"));
    }

    #[tokio::test]
    async fn the_socket_is_owned_by_box_root_and_replaces_a_planted_link() {
        if !nix::unistd::geteuid().is_root() {
            berth_testkit::skip("root", "chown needs root");
            return;
        }
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let id = berth_protocol::BoxId::from_random([3; 20]);
        let paths = Layout::new(dir.path()).box_paths(&id);
        std::fs::create_dir_all(paths.run_dir()).unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "host file").unwrap();
        let before = std::fs::metadata(&victim).unwrap();
        std::os::unix::fs::symlink(&victim, paths.egress_socket()).unwrap();
        let map = IdMap::for_slot(5).unwrap();
        let listener = bind(&paths, map).unwrap();
        let meta = std::fs::symlink_metadata(paths.egress_socket()).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_socket(&meta.file_type()));
        assert_eq!((meta.uid(), meta.mode() & 0o777), (map.host_id(0), 0o600));
        let victim_meta = std::fs::metadata(&victim).unwrap();
        assert_eq!(
            (victim_meta.uid(), victim_meta.mode()),
            (before.uid(), before.mode())
        );
        // Connections by the run-dir path reach the listener.
        let _client = tokio::net::UnixStream::connect(paths.egress_socket())
            .await
            .unwrap();
        listener.accept().await.unwrap();
    }
}
