//! Mount points in the shared read-only rootfs: the OCI runtime cannot create them once the
//! rootfs is read-only (and box root may not write to the host-owned skeleton anyway), so
//! berth makes them before `runc run`. Idempotent and safe with concurrent starts: each
//! component is created with `mkdir` (an existing directory is fine) and checked to be a
//! real directory, never a link.

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use crate::error::io;
use crate::fs::set_mode;
use crate::layer::LayerError;
use crate::{BoxSpec, RuntimeError};

/// Mode of every directory created here: the box user must traverse to a layer.
const MODE: u32 = 0o755;

/// Checks the spec's layers ([`crate::layer::check_layers`]) and makes their mount points
/// and berth's own (`/var/lib/berth`) in `rootfs`.
pub fn prepare(rootfs: &Path, spec: &BoxSpec) -> Result<(), RuntimeError> {
    check_layers(spec)?;
    ensure(rootfs, berth_protocol::guest::AGENT_STATE_DIR)?;
    ensure_file(rootfs, berth_protocol::guest::BOX_CA_BUNDLE)?;
    for layer in &spec.layers {
        ensure(rootfs, &layer.target)?;
    }
    Ok(())
}

/// Checks the spec's layers ([`crate::layer::check_layers`]) without touching anything.
pub fn check_layers(spec: &BoxSpec) -> Result<(), RuntimeError> {
    crate::layer::check_layers(&spec.layers).map_err(|(i, reason)| invalid(spec, i, reason))
}

fn invalid(spec: &BoxSpec, i: usize, reason: LayerError) -> RuntimeError {
    let layer = &spec.layers[i];
    RuntimeError::InvalidSpec {
        what: format!("layer {i} ({} -> {})", layer.source.display(), layer.target),
        reason,
    }
}

/// Makes an empty file at `target` (absolute, in-box) under `rootfs` for a file bind mount,
/// its directories as [`ensure`] does.
pub fn ensure_file(rootfs: &Path, target: &str) -> Result<(), RuntimeError> {
    let (dir, _) = target.rsplit_once('/').expect("an absolute path");
    ensure(rootfs, dir)?;
    let path = rootfs.join(target.trim_start_matches('/'));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = path
                .symlink_metadata()
                .map_err(io("inspect the mount point", &path))?;
            if meta.is_file() {
                Ok(())
            } else {
                Err(RuntimeError::Io {
                    action: "create the file mount point (a directory or link is in the way)",
                    path,
                    source: e,
                })
            }
        }
        Err(e) => Err(io("create the mount point", &path)(e)),
    }
}

/// Makes the directory `target` (absolute, in-box) under `rootfs`, component by component.
pub fn ensure(rootfs: &Path, target: &str) -> Result<(), RuntimeError> {
    let mut path = rootfs.to_path_buf();
    for part in target.split('/').filter(|p| !p.is_empty()) {
        path.push(part);
        match std::fs::DirBuilder::new().mode(MODE).create(&path) {
            // The umask may have narrowed the mode.
            Ok(()) => set_mode(&path, MODE)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io("create the mount point", &path)(e)),
        }
        let meta = path
            .symlink_metadata()
            .map_err(io("inspect the mount point", &path))?;
        if !meta.is_dir() {
            return Err(RuntimeError::Io {
                action: "create the mount point (a file or link is in the way)",
                path,
                source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn mount_points_are_made_once_with_mode_0755_and_never_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let rootfs = dir.path();
        ensure(rootfs, "/opt/harness").unwrap();
        ensure(rootfs, "/opt/harness").unwrap();
        for p in ["opt", "opt/harness"] {
            let meta = std::fs::metadata(rootfs.join(p)).unwrap();
            assert!(meta.is_dir());
            assert_eq!(meta.permissions().mode() & 0o777, MODE, "{p}");
        }
        std::os::unix::fs::symlink("/tmp", rootfs.join("lnk")).unwrap();
        assert!(ensure(rootfs, "/lnk/x").is_err());
        std::fs::write(rootfs.join("file"), "").unwrap();
        assert!(ensure(rootfs, "/file").is_err());
        // Many starts at once all succeed.
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| ensure(rootfs, "/mnt/skills/a/b/c").unwrap());
            }
        });
        assert!(rootfs.join("mnt/skills/a/b/c").is_dir());
    }
}
