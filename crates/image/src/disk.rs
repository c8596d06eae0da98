//! Read-only disk images in the store: the template rootfs and shared layers.

use std::path::{Path, PathBuf};

use crate::error::io;
use crate::ext4::{make, Journal};
use crate::key::KeyBuilder;
use crate::store::install;
use crate::{ContentKey, ImageError, ImageStore, Progress};

/// The rootfs image's label (informational: the VM finds disks by virtio serial).
pub const ROOTFS_LABEL: &str = "berth-root";
/// A layer image's label.
pub const LAYER_LABEL: &str = "berth-layer";

/// A disk image in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskImage {
    pub key: ContentKey,
    /// `<images>/rootfs/<key>.ext4` or `<images>/layers/<key>.ext4`, mode 0444.
    pub path: PathBuf,
    /// The image's size (sparse: less is used on disk).
    pub size_bytes: u64,
}

impl DiskImage {
    /// The image at `path` when it is there.
    pub(crate) fn existing(key: ContentKey, path: PathBuf) -> Option<DiskImage> {
        let size_bytes = std::fs::metadata(&path).ok().filter(|m| m.is_file())?.len();
        Some(DiskImage {
            key,
            path,
            size_bytes,
        })
    }
}

/// A shared layer directory as a read-only ext4 image, keyed by the tree's content (every
/// file's bytes, mode, owner, link target). Hashes the whole tree each call; builds only
/// when that content has no image yet.
pub fn layer_image(
    store: &ImageStore,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<DiskImage, ImageError> {
    progress.stage(&format!("hash the layer {}", dir.display()));
    let key = KeyBuilder::new("layer").tree("dir", dir)?.finish();
    let path = store.layer_path(&key);
    if let Some(image) = DiskImage::existing(key.clone(), path.clone()) {
        return Ok(image);
    }
    progress.stage(&format!("make the layer image for {}", dir.display()));
    let scratch = store.scratch("layer")?;
    read_only_image(dir, scratch.path(), LAYER_LABEL, key, &path)
}

/// Makes the read-only image of `tree` in `scratch` and moves it to `dest`.
pub(crate) fn read_only_image(
    tree: &Path,
    scratch: &Path,
    label: &str,
    key: ContentKey,
    dest: &Path,
) -> Result<DiskImage, ImageError> {
    use std::os::unix::fs::PermissionsExt;
    let out = scratch.join("image.ext4");
    let size_bytes = make(tree, &out, label, None, Journal::No)?;
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o444))
        .map_err(io("chmod", &out))?;
    install(&out, dest)?;
    Ok(DiskImage {
        key,
        path: dest.into(),
        size_bytes,
    })
}
