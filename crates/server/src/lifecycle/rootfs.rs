//! The rootfs a box starts on: the host's `/usr` on the sandbox, or the template base's
//! image on a VM runtime. Image bases that build in seconds from what the host has
//! (`minimal`, `dir:`, `tarball:`) are built (once, content-addressed) at the first start that
//! needs them, off the async threads; a Debian image (`debian`, `desktop`) takes minutes and
//! the mirror, so it must have been built by `berth image build` (the start fails with that
//! hint otherwise).
//! A VM image gets the template's layer mount points added (`berth_image::with_mount_points`:
//! a copy made once per image and set of targets), or the start fails with why it cannot.

use std::path::{Path, PathBuf};

use berth_image::{ImageStore, NoProgress};
use berth_runtime::Rootfs;

use super::rootfs_error::RootfsError;
use crate::images::BuiltImages;
use crate::runtimes::runs_base;
use crate::templates::Base;

/// The rootfs of a box of `template` (base `base`, layers mounted at `layer_targets`) on
/// `runtime`.
pub async fn rootfs_for(
    data_dir: &Path,
    template: &str,
    base: &Base,
    layer_targets: Vec<String>,
    runtime: &str,
) -> Result<Rootfs, RootfsError> {
    let Rootfs::Image(image) = base_rootfs(data_dir, template, base, runtime).await? else {
        return Ok(Rootfs::Host);
    };
    if layer_targets.is_empty() {
        return Ok(Rootfs::Image(image));
    }
    let store = ImageStore::new(data_dir);
    let base_name = base.to_string();
    crate::lifecycle::detached::blocking(move || {
        berth_image::with_mount_points(&store, &image, &layer_targets)
    })
    .await
    .map_err(RootfsError::Task)?
    .map(Rootfs::Image)
    .map_err(|source| RootfsError::MountPoints {
        base: base_name,
        source,
    })
}

/// The template base's own rootfs.
async fn base_rootfs(
    data_dir: &Path,
    template: &str,
    base: &Base,
    runtime: &str,
) -> Result<Rootfs, RootfsError> {
    if !runs_base(runtime, base.is_image()) {
        return Err(RootfsError::WrongRuntime {
            base: base.to_string(),
            runtime: runtime.to_owned(),
        });
    }
    let name = base.to_string();
    let job = match base {
        Base::Host => return Ok(Rootfs::Host),
        Base::Debian { .. } | Base::Desktop => {
            let built = BuiltImages::load(data_dir).map_err(RootfsError::Record)?;
            return match built.rootfs(&name) {
                Some(path) => Ok(Rootfs::Image(path.to_path_buf())),
                None => Err(RootfsError::NotBuilt {
                    base: name,
                    template: template.to_owned(),
                }),
            };
        }
        Base::Minimal => Job::Minimal,
        Base::Dir(dir) => Job::Dir(dir.clone()),
        Base::Tarball(file) => Job::Tarball(file.clone()),
    };
    let store = ImageStore::new(data_dir);
    let image = crate::lifecycle::detached::blocking(move || match job {
        Job::Minimal => berth_image::rootfs_minimal(&store, &NoProgress),
        Job::Dir(dir) => berth_image::rootfs_from_dir(&store, &dir, &NoProgress),
        Job::Tarball(file) => berth_image::rootfs_from_tarball(&store, &file, &NoProgress),
    })
    .await
    .map_err(RootfsError::Task)?
    .map_err(|source| RootfsError::Build { base: name, source })?;
    Ok(Rootfs::Image(image.path))
}

/// An image built at start.
enum Job {
    Minimal,
    Dir(PathBuf),
    Tarball(PathBuf),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_unbuilt_desktop_names_the_command_that_builds_it() {
        let dir = tempfile::tempdir().unwrap();
        for runtime in ["sandbox", "qemu"] {
            let err = rootfs_for(dir.path(), "desktop", &Base::Desktop, Vec::new(), runtime)
                .await
                .unwrap_err();
            assert!(
                matches!(err, RootfsError::NotBuilt { .. })
                    && err
                        .to_string()
                        .contains("run `berth image build --template desktop`"),
                "{err}"
            );
        }
    }
}
