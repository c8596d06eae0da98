//! Where images live in the data dir, and putting a finished build in place atomically.

use std::path::{Path, PathBuf};

use crate::error::io;
use crate::{ContentKey, ImageError};

/// `<data>/images`: kernels, initramfs archives, rootfs and layer images, each named by
/// its content key.
#[derive(Debug, Clone)]
pub struct ImageStore {
    root: PathBuf,
}

impl ImageStore {
    /// The store of the data dir `data_dir` (it lives at `<data_dir>/images`).
    pub fn new(data_dir: &Path) -> Self {
        ImageStore {
            root: data_dir.join("images"),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<images>/kernel/<key>/`: `vmlinuz`, `version`, `lib/modules/<ver>/`.
    pub fn kernel_dir(&self, key: &ContentKey) -> PathBuf {
        self.root.join("kernel").join(key.as_str())
    }

    /// `<images>/initramfs/<key>.cpio`.
    pub fn initramfs_path(&self, key: &ContentKey) -> PathBuf {
        self.root.join("initramfs").join(format!("{key}.cpio"))
    }

    /// `<images>/rootfs/<key>.ext4`.
    pub fn rootfs_path(&self, key: &ContentKey) -> PathBuf {
        self.root.join("rootfs").join(format!("{key}.ext4"))
    }

    /// `<images>/layers/<key>.ext4`.
    pub fn layer_path(&self, key: &ContentKey) -> PathBuf {
        self.root.join("layers").join(format!("{key}.ext4"))
    }

    /// `<images>/tmp/`: scratch dirs of builds in progress.
    pub(crate) fn scratch_parent(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// A fresh scratch dir under the store (removed when dropped), on the same file system
    /// as the images so a finished one can be renamed into place.
    pub(crate) fn scratch(&self, what: &str) -> Result<tempfile::TempDir, ImageError> {
        let parent = self.scratch_parent();
        std::fs::create_dir_all(&parent).map_err(io("create the directory", &parent))?;
        tempfile::Builder::new()
            .prefix(&format!("{what}-"))
            .tempdir_in(&parent)
            .map_err(io("create a scratch directory in", &parent))
    }
}

/// Renames the finished `built` to `dest`. When `dest` appeared meanwhile (another build of
/// the same key won the race), theirs is as good as ours: ours is dropped.
pub(crate) fn install(built: &Path, dest: &Path) -> Result<(), ImageError> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(io("create the directory", parent))?;
    }
    if dest.exists() {
        return Ok(());
    }
    match std::fs::rename(built, dest) {
        Ok(()) => Ok(()),
        Err(_) if dest.exists() => Ok(()),
        Err(source) => Err(ImageError::Io {
            action: "move the built image to",
            path: dest.into(),
            source,
        }),
    }
}
