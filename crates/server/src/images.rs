//! The VM images `berth image build` made, as the daemon finds them: `<data>/images/built.json`
//! names the kernel, the initramfs and each template base's rootfs image. The daemon never
//! downloads at start (the kernel and Debian images come from the mirror): it reads this
//! record, and a VM runtime without its images is unavailable with "run `berth image build`".
//! Bases that build in seconds from what the host has (`minimal`, `dir:`, `tarball:`) are
//! built at a box's first start instead (`lifecycle/rootfs.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// `<data>/images/built.json`.
pub const BUILT_FILE: &str = "built.json";

/// What `berth image build` last made.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuiltImages {
    /// The kernel QEMU boots (the bzImage).
    pub kernel: Option<PathBuf>,
    /// The kernel as an uncompressed ELF, for Firecracker.
    #[serde(default)]
    pub vmlinux: Option<PathBuf>,
    pub initramfs: Option<PathBuf>,
    /// By base, as a template writes it (`minimal`, `debian`, `debian:trixie`, …).
    #[serde(default)]
    pub rootfs: BTreeMap<String, PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum BuiltImagesError {
    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a record of built images; run `berth image build` again", path.display())]
    Corrupt {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl BuiltImages {
    pub fn path(data_dir: &Path) -> PathBuf {
        images_root(data_dir).join(BUILT_FILE)
    }

    /// The record, or an empty one when nothing was built yet.
    pub fn load(data_dir: &Path) -> Result<BuiltImages, BuiltImagesError> {
        let path = Self::path(data_dir);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BuiltImages::default()),
            Err(source) => {
                return Err(BuiltImagesError::Io {
                    action: "read",
                    path,
                    source,
                })
            }
        };
        let stored: BuiltImages = serde_json::from_slice(&text)
            .map_err(|source| BuiltImagesError::Corrupt { path, source })?;
        Ok(stored.rebased(|p| images_root(data_dir).join(p)))
    }

    /// Writes the record whole (a temp file renamed over the old one).
    pub fn save(&self, data_dir: &Path) -> Result<(), BuiltImagesError> {
        let path = Self::path(data_dir);
        let io = |action, path: &Path| {
            let path = path.to_path_buf();
            move |source| BuiltImagesError::Io {
                action,
                path,
                source,
            }
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io("create", parent))?;
        }
        // Relative to the images dir, so the record stays true when the dir is moved or
        // shared (a symlink to a cache of images).
        let root = images_root(data_dir);
        let relative = self.clone().rebased(|p| {
            p.strip_prefix(&root)
                .map(Path::to_path_buf)
                .unwrap_or_else(|_| p.to_path_buf())
        });
        let text = serde_json::to_vec_pretty(&relative).expect("a record serialises");
        berth_basics::write_atomically(&path, &text, 0o644).map_err(io("write", &path))
    }

    fn rebased(self, map: impl Fn(&Path) -> PathBuf) -> BuiltImages {
        BuiltImages {
            kernel: self.kernel.as_deref().map(&map),
            vmlinux: self.vmlinux.as_deref().map(&map),
            initramfs: self.initramfs.as_deref().map(&map),
            rootfs: self
                .rootfs
                .iter()
                .map(|(base, path)| (base.clone(), map(path)))
                .collect(),
        }
    }

    /// The rootfs image built for `base` (its template spelling), if it is still there.
    pub fn rootfs(&self, base: &str) -> Option<&Path> {
        self.rootfs
            .get(base)
            .map(PathBuf::as_path)
            .filter(|p| p.is_file())
    }
}

fn images_root(data_dir: &Path) -> PathBuf {
    berth_image::ImageStore::new(data_dir).root().to_path_buf()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            BuiltImages::load(dir.path()).unwrap(),
            BuiltImages::default()
        );
        let images = dir.path().join("images");
        std::fs::create_dir_all(images.join("rootfs")).unwrap();
        let image = images.join("rootfs/root.ext4");
        std::fs::write(&image, b"x").unwrap();
        let record = BuiltImages {
            kernel: Some("/k".into()),
            vmlinux: Some(images.join("kernel/k/vmlinux")),
            initramfs: Some(images.join("initramfs/i.cpio")),
            rootfs: [("minimal".to_owned(), image.clone())].into(),
        };
        record.save(dir.path()).unwrap();
        let text = std::fs::read_to_string(BuiltImages::path(dir.path())).unwrap();
        assert!(
            text.contains("\"rootfs/root.ext4\"") && text.contains("\"kernel/k/vmlinux\""),
            "stored relative: {text}"
        );
        let read = BuiltImages::load(dir.path()).unwrap();
        assert_eq!(read, record);
        assert_eq!(read.rootfs("minimal"), Some(image.as_path()));
        assert_eq!(read.rootfs("debian"), None);
        std::fs::write(BuiltImages::path(dir.path()), b"{").unwrap();
        assert!(matches!(
            BuiltImages::load(dir.path()),
            Err(BuiltImagesError::Corrupt { .. })
        ));
    }
}
