//! The images a VM box boots, built (or found) like the runtime's tests build them: the
//! Debian cloud kernel, the initramfs with berth-init, the `minimal` rootfs.

use std::path::PathBuf;

use super::super::daemon::BenchResult;

#[derive(Debug, Clone)]
pub struct VmImages {
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub rootfs: PathBuf,
}

/// Builds the images into `$BERTH_TEST_IMAGE_DIR` (default `/var/tmp/berth-test-images`,
/// shared with the runtime's tests; content-addressed, so a second run reuses them).
pub fn vm_images() -> BenchResult<VmImages> {
    use berth_image::{ImageStore, Kernel, NoProgress};
    let init = berth_runtime::init_binary()?;
    let dir = berth_testkit::image_cache::dir();
    let store = ImageStore::new(&dir);
    let kernel = Kernel::debian_cloud(&store, &NoProgress)?;
    let initramfs = berth_image::build_initramfs(&store, &kernel, &init, &NoProgress)?;
    let rootfs = berth_image::rootfs_minimal(&store, &NoProgress)?;
    Ok(VmImages {
        kernel: kernel.vmlinuz,
        initramfs: initramfs.path,
        rootfs: rootfs.path,
    })
}
