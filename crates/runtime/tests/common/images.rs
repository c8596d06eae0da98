//! The VM images the VM tests boot: the Debian cloud kernel (and, for Firecracker, its
//! uncompressed `vmlinux`), an initramfs with berth-init and the `minimal` (busybox)
//! rootfs, built once per test binary into
//! `$BERTH_TEST_IMAGE_DIR` (default `/var/tmp/berth-test-images`; content-addressed, so
//! later runs reuse them).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

/// The images every VM test boots.
#[derive(Debug, Clone)]
pub struct Images {
    pub kernel: PathBuf,
    /// The kernel as an ELF `vmlinux`, which Firecracker boots on x86_64
    /// (`$BERTH_FIRECRACKER_KERNEL`, else extracted from `kernel`).
    pub vmlinux: Result<PathBuf, String>,
    pub kernel_version: String,
    pub initramfs: PathBuf,
    pub rootfs: PathBuf,
}

/// Builds (or finds) the images once per test binary: `Err` is why the tests skip.
pub fn images() -> Result<Images, String> {
    static IMAGES: OnceLock<Result<Images, String>> = OnceLock::new();
    IMAGES.get_or_init(build_images).clone()
}

fn build_images() -> Result<Images, String> {
    use berth_image::{ImageError, ImageStore, Kernel, NoProgress};
    let init = berth_runtime::init_binary().map_err(|e| e.to_string())?;
    let dir = berth_testkit::image_cache::dir();
    let store = ImageStore::new(&dir);
    let skip_or_fail = |what: &str, e: ImageError| match e {
        e @ (ImageError::MissingTool { .. } | ImageError::NoMirror { .. }) => {
            format!("cannot build the {what}: {e}")
        }
        e => panic!(
            "building the {what} failed: {}",
            berth_runtime::error_chain(&e)
        ),
    };
    let t0 = Instant::now();
    let kernel =
        Kernel::debian_cloud(&store, &NoProgress).map_err(|e| skip_or_fail("kernel", e))?;
    let initramfs = berth_image::build_initramfs(&store, &kernel, &init, &NoProgress)
        .map_err(|e| skip_or_fail("initramfs", e))?;
    let rootfs = berth_image::rootfs_minimal(&store, &NoProgress)
        .map_err(|e| skip_or_fail("minimal rootfs", e))?;
    let vmlinux = match std::env::var_os("BERTH_FIRECRACKER_KERNEL") {
        Some(path) => Ok(PathBuf::from(path)),
        None => {
            berth_image::vmlinux(&kernel).map_err(|e| format!("no vmlinux of the test kernel: {e}"))
        }
    };
    eprintln!("images ready in {:?} (in {})", t0.elapsed(), dir.display());
    Ok(Images {
        vmlinux,
        kernel_version: kernel
            .modules
            .as_ref()
            .map(|m| m.version.clone())
            .unwrap_or_default(),
        kernel: kernel.vmlinuz,
        initramfs: initramfs.path,
        rootfs: rootfs.path,
    })
}

/// Why the host cannot run VMs at all (binaries), before any image is built.
pub fn vm_binaries() -> Result<(), String> {
    let (env, name) = ("BERTH_QEMU", berth_runtime::qemu::DEFAULT_QEMU);
    if berth_runtime::qemu::find_program(env, name).is_none() {
        return Err(format!(
            "{name} is not installed (scripts/install-deps.sh --tests, or set {env})"
        ));
    }
    berth_runtime::init_binary()
        .map(drop)
        .map_err(|e| e.to_string())
}
