//! The disk images of a boot, from `berth-image`: the box's volume (created on the first
//! start, grown when the configured size rises, never shrunk) and each shared layer's
//! read-only image (content-addressed: built once per layer content).

use std::path::{Path, PathBuf};

use berth_image::{ImageError, ImageStore, NoProgress};

use crate::{Layer, RuntimeError};

/// Creates the volume at `path` on the first start (or grows it to `size_mib`).
pub async fn ensure(path: &Path, size_mib: u64) -> Result<(), RuntimeError> {
    let owned = path.to_path_buf();
    let result = blocking(path, move || berth_image::ensure_volume(&owned, size_mib)).await?;
    match result {
        Ok(change) => {
            tracing::debug!(path = %path.display(), ?change, "box volume");
            Ok(())
        }
        Err(e) => Err(image_error("prepare the box volume", path, e)),
    }
}

/// The read-only image of a layer's host directory (built when its content is new).
pub async fn layer_image(data_dir: &Path, layer: &Layer) -> Result<PathBuf, RuntimeError> {
    let store = ImageStore::new(data_dir);
    let source = layer.source.clone();
    blocking(&layer.source, move || {
        berth_image::layer_image(&store, &source, &NoProgress)
    })
    .await?
    .map(|image| image.path)
    .map_err(|e| image_error("make the layer image of", &layer.source, e))
}

/// Runs a blocking image build off the async workers (it runs mkfs and friends).
async fn blocking<T: Send + 'static>(
    path: &Path,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RuntimeError> {
    crate::blocking::spawn_blocking(work)
        .await
        .map_err(|e| RuntimeError::Io {
            action: "build an image for",
            path: path.to_path_buf(),
            source: std::io::Error::other(e),
        })
}

fn image_error(action: &'static str, path: &Path, e: ImageError) -> RuntimeError {
    match e {
        ImageError::MissingTool { tool, package } => RuntimeError::Missing {
            what: format!("`{tool}`"),
            hint: format!("apt-get install {package} (or run scripts/install-deps.sh)"),
        },
        other => RuntimeError::Io {
            action,
            path: path.to_path_buf(),
            source: std::io::Error::other(other),
        },
    }
}
