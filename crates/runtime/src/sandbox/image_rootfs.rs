//! A box whose rootfs is an image (`Rootfs::Image`: `minimal`, `debian`, `dir:`,
//! `tarball:` templates): the same read-only ext4 a VM boots, loop-attached read-only and
//! mounted idmapped at `<box>/rootfs` (`ro,noload,nosuid,nodev`) for the length of a boot,
//! and used as the bundle's root. Through the idmap the image's root-owned files are box
//! root's, exactly as in a VM.
//!
//! Each box has its own loop device and mount of the image (sharing one mount between the
//! boxes of an image would save a device each; not done). The mount is only ever read:
//! the image is opened read-only, the device is read-only and the file system is mounted
//! without a journal replay, so one image file serves every box at once.
//!
//! Nothing is created in the image: every mount point the bundle needs must be in it
//! (berth-image's skeleton adds berth's own, the daemon adds layer targets with
//! `berth_image::with_mount_points`); a missing one fails the start naming it. Every stop
//! (and every failed start) unmounts, which frees the device (autoclear); [`reconcile`]
//! releases what a daemon that died with boxes up left mounted.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use berth_protocol::guest::{AGENT_STATE_DIR, BOX_CA_BUNDLE};

use super::idmap_mount::{
    is_mounted, mount_idmapped, mount_points, unmount, user_namespace, Access,
};
use super::loop_device::attach_read_only;
use super::paths::{BoxPaths, Layout};
use super::rootfs::INIT_PATH;
use super::volume_error::VolumeError;
use super::volume_mount::canonical;
use crate::{BoxSpec, IdMap, RuntimeError};

use super::paths::ROOTFS_MOUNT_NAME as MOUNT_NAME;

/// Directories the bundle mounts over, besides the layers' targets.
const DIRS: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/tmp",
    "/run",
    "/home/user",
    "/memory",
    AGENT_STATE_DIR,
];
/// Files the bundle binds over.
const FILES: &[&str] = &[INIT_PATH, "/etc/hosts", BOX_CA_BUNDLE];

#[derive(Debug, thiserror::Error)]
pub enum ImageRootfsError {
    /// The image lacks a directory or file the bundle mounts over: the OCI runtime cannot
    /// create it in a read-only rootfs.
    #[error("the rootfs image {image} has no {kind} at {target}, where the box needs a mount point: rebuild the image with this berth (`berth image build`){}", if *.is_layer { ", or give the layer a target the image has" } else { "" })]
    MissingMountPoint {
        image: PathBuf,
        target: String,
        kind: &'static str,
        is_layer: bool,
    },

    #[error("cannot mount the rootfs image {image}")]
    Mount {
        image: PathBuf,
        #[source]
        source: Box<VolumeError>,
    },

    #[error("cannot unmount the rootfs image at {target}")]
    Unmount {
        target: PathBuf,
        #[source]
        source: Box<VolumeError>,
    },
}

impl From<ImageRootfsError> for RuntimeError {
    fn from(e: ImageRootfsError) -> RuntimeError {
        let path = match &e {
            ImageRootfsError::MissingMountPoint { image, .. }
            | ImageRootfsError::Mount { image, .. } => image.clone(),
            ImageRootfsError::Unmount { target, .. } => target.clone(),
        };
        RuntimeError::Io {
            action: "boot the box from the rootfs image",
            path,
            source: std::io::Error::other(e),
        }
    }
}

/// Mounts `image` read-only and idmapped with `id_map` at the box's rootfs mount point and
/// checks it has every mount point `spec` needs (blocking). On error nothing stays mounted.
pub fn mount(paths: &BoxPaths, image: &Path, spec: &BoxSpec) -> Result<PathBuf, ImageRootfsError> {
    let target = paths.rootfs_mount();
    // What an earlier boot left (the box is not running: start checked).
    release(paths)?;
    let mount_err = |source| ImageRootfsError::Mount {
        image: image.into(),
        source: Box::new(source),
    };
    make_mount_point(&target).map_err(mount_err)?;
    mount_at(image, &target, spec.id_map).map_err(mount_err)?;
    if let Err(e) = check_mount_points(&target, image, spec) {
        let _ = release(paths);
        return Err(e);
    }
    Ok(target)
}

fn mount_at(image: &Path, target: &Path, id_map: IdMap) -> Result<(), VolumeError> {
    let userns = user_namespace(id_map)?;
    let device = attach_read_only(image)?;
    mount_idmapped(&device.path(), target, &userns, Access::ReadOnly)?;
    tracing::debug!(image = %image.display(), device = device.number(), target = %target.display(), "rootfs image mounted");
    // The mount holds the device now; closing this handle lets it autoclear at unmount.
    drop(device);
    Ok(())
}

/// Unmounts the box's rootfs image (nothing mounted: fine). Its loop device frees itself
/// with its last user: the unmount, or the box's mount namespace if one lingers.
pub fn release(paths: &BoxPaths) -> Result<(), ImageRootfsError> {
    let target = canonical(&paths.rootfs_mount());
    unmount(&target).map_err(|source| ImageRootfsError::Unmount {
        target,
        source: Box::new(source),
    })
}

/// Whether the box's rootfs image is mounted on the host now.
pub fn is_mounted_for(paths: &BoxPaths) -> bool {
    is_mounted(&canonical(&paths.rootfs_mount()))
}

/// The loop device (`/dev/loopN` number) the box's rootfs image is mounted from, while it is.
pub fn loop_device_of(paths: &BoxPaths) -> Option<u32> {
    let target = canonical(&paths.rootfs_mount());
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split(' ').nth(4)?;
        if Path::new(point) != target {
            return None;
        }
        right
            .split(' ')
            .nth(1)?
            .strip_prefix("/dev/loop")?
            .parse()
            .ok()
    })
}

/// Unmounts the rootfs images of this data dir's boxes that are not in `alive` (box ids
/// with a container): what a daemon killed with boxes up left behind. Returns the ids
/// released; failures are logged and skipped.
pub fn reconcile(layout: &Layout, alive: &HashSet<String>) -> Vec<String> {
    let boxes = canonical(&layout.boxes_dir());
    let mut released = Vec::new();
    for point in mount_points() {
        if point.file_name().is_none_or(|n| n != MOUNT_NAME) {
            continue;
        }
        let Some(dir) = point.parent() else { continue };
        if dir.parent() != Some(boxes.as_path()) {
            continue;
        }
        let Some(id) = dir.file_name().and_then(|n| n.to_str()).map(String::from) else {
            continue;
        };
        if alive.contains(&id) {
            continue;
        }
        match release(&BoxPaths::at(dir.to_path_buf())) {
            Ok(()) => {
                tracing::info!(box_id = %id, "released the rootfs image mount an earlier daemon left");
                released.push(id);
            }
            Err(e) => {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot release a leftover rootfs image mount")
            }
        }
    }
    released
}

/// Every directory and file the bundle mounts over is in the mounted image as that kind
/// (a link is refused: the OCI runtime would follow it out of place).
fn check_mount_points(root: &Path, image: &Path, spec: &BoxSpec) -> Result<(), ImageRootfsError> {
    let dirs = DIRS
        .iter()
        .map(|d| (*d, false))
        .chain(spec.layers.iter().map(|l| (l.target.as_str(), true)));
    for (target, is_layer) in dirs {
        let meta = std::fs::symlink_metadata(root.join(target.trim_start_matches('/')));
        if !meta.is_ok_and(|m| m.is_dir()) {
            return Err(ImageRootfsError::MissingMountPoint {
                image: image.into(),
                target: target.into(),
                kind: "directory",
                is_layer,
            });
        }
    }
    for target in FILES {
        let meta = std::fs::symlink_metadata(root.join(target.trim_start_matches('/')));
        if !meta.is_ok_and(|m| m.is_file()) {
            return Err(ImageRootfsError::MissingMountPoint {
                image: image.into(),
                target: (*target).into(),
                kind: "file",
                is_layer: false,
            });
        }
    }
    Ok(())
}

/// Root's, 0755: once mounted, the image's own root covers it.
fn make_mount_point(target: &Path) -> Result<(), VolumeError> {
    match std::fs::create_dir(target) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(VolumeError::Io {
            action: "create the rootfs mount point",
            path: target.into(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BootToken, Layer, Limits, Rootfs};

    fn spec(layers: Vec<Layer>) -> BoxSpec {
        BoxSpec {
            id: berth_protocol::BoxId::from_random([3; 20]),
            hostname: "b".into(),
            rootfs: Rootfs::Image("/images/x.ext4".into()),
            limits: Limits::default(),
            boot_token: BootToken::from_random([0; 32]),
            id_map: IdMap::for_slot(1).unwrap(),
            layers,
            harness: None,
            egress: Default::default(),
            env: Default::default(),
            memory: None,
            services: Vec::new(),
            disk_mib: crate::DEFAULT_DISK_MIB,
        }
    }

    /// Every mount point the bundle needs is checked, a missing one (or a link in its
    /// place) named, a layer's with the hint about its target.
    #[test]
    fn each_mount_point_must_be_in_the_image_as_its_kind() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let image = Path::new("/images/x.ext4");
        let layer = Layer {
            source: "/srv/layer".into(),
            target: "/mnt/skills".into(),
        };
        for d in DIRS {
            std::fs::create_dir_all(root.join(d.trim_start_matches('/'))).unwrap();
        }
        for f in FILES {
            let path = root.join(f.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        check_mount_points(root, image, &spec(Vec::new())).unwrap();
        let err = check_mount_points(root, image, &spec(vec![layer.clone()])).unwrap_err();
        assert!(
            matches!(&err, ImageRootfsError::MissingMountPoint { target, is_layer: true, .. } if target == "/mnt/skills"),
            "{err}"
        );
        assert!(err
            .to_string()
            .contains("give the layer a target the image has"));
        std::fs::create_dir_all(root.join("mnt/skills")).unwrap();
        check_mount_points(root, image, &spec(vec![layer])).unwrap();

        std::fs::remove_file(root.join(".berth/berth-init")).unwrap();
        std::os::unix::fs::symlink("/bin/sh", root.join(".berth/berth-init")).unwrap();
        let err = check_mount_points(root, image, &spec(Vec::new())).unwrap_err();
        assert!(
            matches!(&err, ImageRootfsError::MissingMountPoint { target, kind: "file", is_layer: false, .. } if target == INIT_PATH),
            "{err}"
        );
        std::fs::remove_dir(root.join("memory")).unwrap();
        let err = check_mount_points(root, image, &spec(Vec::new())).unwrap_err();
        assert!(err.to_string().contains("no directory at /memory"), "{err}");
    }
}
