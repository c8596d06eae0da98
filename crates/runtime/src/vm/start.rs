//! The steps of a VM start that do not depend on the VMM: the spec checks, the box's
//! private dirs and volume, and cleaning up after a boot that failed.

use std::future::Future;
use std::path::PathBuf;

use super::{volume, VmPaths};
use crate::error::wrong_state;
use crate::{Booted, BoxSpec, Rootfs, RuntimeError, RuntimeStatus};

/// The rootfs image a VM boots: a VM has no host rootfs to share.
pub(crate) fn rootfs_image(spec: &BoxSpec, backend: &'static str) -> Result<PathBuf, RuntimeError> {
    match &spec.rootfs {
        Rootfs::Image(path) => Ok(path.clone()),
        Rootfs::Host => Err(RuntimeError::Unsupported {
            backend,
            operation: "the host rootfs (a VM boots a template's rootfs image)",
        }),
    }
}

/// Checks the spec's layers, creates the box and VM dirs (0700: the VM dir holds the boot
/// token and control sockets) and the volume on the first start (or grows it).
pub(crate) async fn prepare_box(spec: &BoxSpec, paths: &VmPaths) -> Result<(), RuntimeError> {
    crate::layer::check_layers(&spec.layers).map_err(|(i, reason)| {
        let layer = &spec.layers[i];
        RuntimeError::InvalidSpec {
            what: format!("layer {i} ({} -> {})", layer.source.display(), layer.target),
            reason,
        }
    })?;
    super::make_private_dir(paths.box_dir())?;
    super::make_private_dir(&paths.vm_dir())?;
    crate::fs::set_mode(&paths.vm_dir(), 0o700)?;
    volume::ensure(&paths.volume(), spec.disk_mib).await?;
    crate::volume_image::mark_guest_written(&paths.volume())
}

/// `Runtime::start` of a VM backend: refuses a box that is not `status` stopped, runs
/// `boot`, and on its failure runs `clean` so nothing of a failed start stays running.
pub(crate) async fn start_or_clean(
    spec: &BoxSpec,
    status: RuntimeStatus,
    boot: impl Future<Output = Result<Booted, RuntimeError>>,
    clean: impl Future<Output = Result<(), RuntimeError>>,
) -> Result<Booted, RuntimeError> {
    if status != RuntimeStatus::Stopped {
        return Err(wrong_state(&spec.id, "start", "stopped", status));
    }
    match boot.await {
        Ok(booted) => Ok(booted),
        Err(e) => {
            if let Err(clean) = clean.await {
                tracing::warn!(box_id = %spec.id, error = %crate::error_chain(&clean), "cleanup after a failed start");
            }
            Err(e)
        }
    }
}
