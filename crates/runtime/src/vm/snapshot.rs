//! What the two VM backends' snapshots share: where a box's snapshot is kept between the
//! VMM that saved it and the one that loads it, and the restored guest's first call.
//!
//! ```text
//! <data>/boxes/<id>/snapshot/            0700, host root only; beside the volume and
//!                                        outside anything a boot's cleanup removes
//! ```
//!
//! Each backend names its own files in it (`firecracker/snapshot.rs`, `qemu/snapshot.rs`).

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_protocol::BoxId;

use super::{hybrid_client, VmPaths};
use crate::error::io;
use crate::{BootToken, Booted, BoxSpec, GuestClient, RuntimeError, RuntimeStatus};

/// A box's kept snapshot: its directory and the files a whole snapshot has.
pub(crate) struct KeptSnapshot {
    dir: PathBuf,
    files: &'static [&'static str],
}

impl KeptSnapshot {
    pub(crate) fn of(paths: &VmPaths, files: &'static [&'static str]) -> KeptSnapshot {
        KeptSnapshot {
            dir: paths.box_dir().join("snapshot"),
            files,
        }
    }

    pub(crate) fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Every file is there: a snapshot cut short by a crash has not all of them.
    pub(crate) fn exists(&self) -> bool {
        self.files.iter().all(|name| self.file(name).is_file())
    }

    /// An empty directory for a new snapshot (the old one removed).
    pub(crate) fn renew(&self) -> Result<(), RuntimeError> {
        self.discard()?;
        super::make_private_dir(&self.dir)
    }

    pub(crate) fn discard(&self) -> Result<(), RuntimeError> {
        crate::fs::remove_dir_all_if_exists(&self.dir, "remove the snapshot")
    }

    /// Bytes on disk: blocks, not lengths, because a memory image is sparse where the
    /// guest never wrote. `None` when there is no whole snapshot.
    pub(crate) fn bytes(&self) -> Result<Option<u64>, RuntimeError> {
        if !self.exists() {
            return Ok(None);
        }
        let mut bytes = 0;
        for name in self.files {
            let path = self.file(name);
            let meta = std::fs::metadata(&path).map_err(io("measure the snapshot file", &path))?;
            bytes += meta.blocks() * 512;
        }
        Ok(Some(bytes))
    }
}

/// A restore: `load` (which launches the VMM and loads the snapshot) when the box is
/// stopped with a whole snapshot kept; `WrongState` when it has none; on a failed load,
/// `clean` undoes the launch (the snapshot stays for another try).
pub(crate) async fn restore_kept(
    spec: &BoxSpec,
    status: RuntimeStatus,
    kept: &KeptSnapshot,
    load: impl Future<Output = Result<Booted, RuntimeError>>,
    clean: impl Future<Output = Result<(), RuntimeError>>,
) -> Result<Booted, RuntimeError> {
    if status == RuntimeStatus::Stopped && !kept.exists() {
        return Err(RuntimeError::WrongState {
            id: spec.id.to_string(),
            operation: "restore",
            expected: "snapshotted",
            actual: "stopped without a snapshot",
        });
    }
    super::start_or_clean(spec, status, load, clean).await
}

/// The restored guest's first calls, over `vsock_socket`: the new boot's token, handed over
/// on a call that the token of the boot it was saved in opens (which also sets the guest's
/// clock, stale by however long it slept), then `info` with the new one. Returns a client
/// holding the new token.
pub(crate) async fn hand_over(
    id: &BoxId,
    vsock_socket: &Path,
    old: &BootToken,
    new: &BootToken,
    deadline: Duration,
) -> Result<GuestClient, RuntimeError> {
    let started = Instant::now();
    let previous = hybrid_client(vsock_socket.to_path_buf(), old);
    let client = hybrid_client(vsock_socket.to_path_buf(), new);
    let calls = async {
        previous.rotate_token(new).await?;
        client.info().await
    };
    let last_error = match tokio::time::timeout(deadline, calls).await {
        Ok(Ok(_)) => return Ok(client),
        Ok(Err(e)) => Some(crate::error_chain(&e)),
        Err(_) => None,
    };
    Err(RuntimeError::NotReady {
        id: id.to_string(),
        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        last_error,
    })
}
