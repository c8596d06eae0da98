//! The guest kernel: Debian's cloud kernel fetched through apt (or a user's own file), with
//! only the modules a VM needs and a `modules.dep` for them, in
//! `<images>/kernel/<key>/{vmlinuz, version, lib/modules/<ver>/}`.

use std::path::{Path, PathBuf};

use crate::error::io;
use crate::key::KeyBuilder;
use crate::modules::{self, ModuleSet};
use crate::store::install;
use crate::{apt, ContentKey, ImageError, ImageStore, Progress};

/// The Debian meta package that depends on the current cloud kernel.
pub const DEBIAN_CLOUD_KERNEL: &str = "linux-image-cloud-amd64";

/// The modules a VM needs, in load order (the rest of what they need comes from
/// `modules.dep`). Debian's cloud kernel builds these as modules; ext4 is built in.
pub const VM_MODULES: &[&str] = &[
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "virtio_blk",
    "vsock",
    "vmw_vsock_virtio_transport_common",
    "vmw_vsock_virtio_transport",
    "virtio_console",
];

/// A kernel in the image store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kernel {
    pub key: ContentKey,
    /// `<images>/kernel/<key>`.
    pub dir: PathBuf,
    /// The kernel image to boot (bzImage for QEMU; a user's vmlinux for Firecracker).
    pub vmlinuz: PathBuf,
    /// The modules shipped with it; `None` for a user kernel given without modules.
    pub modules: Option<KernelModules>,
}

/// The modules a kernel ships into the initramfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelModules {
    /// The kernel release (`uname -r`), e.g. `6.1.0-57-cloud-amd64`.
    pub version: String,
    /// `<kernel dir>/lib/modules/<version>`: the `.ko` files, `modules.dep`, `modules.order`.
    pub dir: PathBuf,
    /// Paths relative to `dir`, in an order that loads each after what it needs (also
    /// written to `modules.order`).
    pub load_order: Vec<String>,
}

impl Kernel {
    /// Debian's cloud kernel, the current one apt knows, with [`VM_MODULES`]. Downloads only
    /// when this version is not in the store yet.
    pub fn debian_cloud(store: &ImageStore, progress: &dyn Progress) -> Result<Kernel, ImageError> {
        progress.stage("resolve the Debian cloud kernel");
        let meta = apt::candidate(store, DEBIAN_CLOUD_KERNEL, progress)?;
        let package = meta
            .depends
            .iter()
            .find(|d| d.starts_with("linux-image-"))
            .ok_or(ImageError::PackageField {
                package: DEBIAN_CLOUD_KERNEL.into(),
                field: "Depends",
            })?;
        let record = apt::candidate(store, package, progress)?;
        let key = KeyBuilder::new("kernel")
            .field("source", "debian-apt")
            .field("package", &record.package)
            .field("version", &record.version)
            .field("modules", VM_MODULES.join(","))
            .finish();
        let dir = store.kernel_dir(&key);
        if dir.join(VERSION_FILE).is_file() {
            return Kernel::load(key, dir);
        }
        let scratch = store.scratch("kernel")?;
        let download = scratch.path().join("download");
        let unpacked = scratch.path().join("unpacked");
        let out = scratch.path().join("out");
        for d in [&download, &unpacked, &out] {
            std::fs::create_dir(d).map_err(io("create the directory", d))?;
        }
        apt::fetch_and_unpack(&record, &download, &unpacked, progress)?;
        let boot = unpacked.join("boot");
        let (vmlinuz, version) = find_vmlinuz(&boot)?;
        copy(&vmlinuz, &out.join(KERNEL_FILE))?;
        progress.stage("select modules");
        let set = modules::select(&unpacked, &version, VM_MODULES)?;
        set.write(&out.join("lib/modules").join(&version))?;
        write_version(&out, &version)?;
        install(&out, &dir)?;
        Kernel::load(key, dir)
    }

    /// A kernel file of the user's (bzImage or vmlinux), without modules: its drivers must
    /// be built in.
    pub fn from_file(store: &ImageStore, path: &Path) -> Result<Kernel, ImageError> {
        check_kernel_file(path)?;
        let key = KeyBuilder::new("kernel")
            .field("source", "file")
            .file("kernel", path)?
            .finish();
        let dir = store.kernel_dir(&key);
        if dir.join(VERSION_FILE).is_file() {
            return Kernel::load(key, dir);
        }
        let scratch = store.scratch("kernel")?;
        let out = scratch.path().join("out");
        std::fs::create_dir(&out).map_err(io("create the directory", &out))?;
        copy(path, &out.join(KERNEL_FILE))?;
        write_version(&out, "")?;
        install(&out, &dir)?;
        Kernel::load(key, dir)
    }

    /// A kernel file of the user's with its modules: `modules_root` holds
    /// `lib/modules/<version>/` (as `dpkg -x` or `make modules_install
    /// INSTALL_MOD_PATH=...` leave it); [`VM_MODULES`] that are not built in are taken from
    /// it. The user's tree is copied, never written to.
    pub fn from_file_with_modules(
        store: &ImageStore,
        path: &Path,
        modules_root: &Path,
        progress: &dyn Progress,
    ) -> Result<Kernel, ImageError> {
        check_kernel_file(path)?;
        let version = only_module_version(modules_root)?;
        let tree = modules_root.join("lib/modules").join(&version);
        let key = KeyBuilder::new("kernel")
            .field("source", "file+modules")
            .file("kernel", path)?
            .tree("modules", &tree)?
            .field("wanted", VM_MODULES.join(","))
            .finish();
        let dir = store.kernel_dir(&key);
        if dir.join(VERSION_FILE).is_file() {
            return Kernel::load(key, dir);
        }
        let scratch = store.scratch("kernel")?;
        let copy_root = scratch.path().join("modules");
        let out = scratch.path().join("out");
        std::fs::create_dir(&out).map_err(io("create the directory", &out))?;
        progress.stage("copy the modules");
        modules::copy_tree(&tree, &copy_root.join("lib/modules").join(&version))?;
        copy(path, &out.join(KERNEL_FILE))?;
        progress.stage("select modules");
        let set = modules::select(&copy_root, &version, VM_MODULES)?;
        set.write(&out.join("lib/modules").join(&version))?;
        write_version(&out, &version)?;
        install(&out, &dir)?;
        Kernel::load(key, dir)
    }

    /// A kernel already in the store.
    fn load(key: ContentKey, dir: PathBuf) -> Result<Kernel, ImageError> {
        let version_file = dir.join(VERSION_FILE);
        let version = std::fs::read_to_string(&version_file)
            .map_err(io("read", &version_file))?
            .trim()
            .to_string();
        let modules = if version.is_empty() {
            None
        } else {
            let mdir = dir.join("lib/modules").join(&version);
            let load_order = ModuleSet::read_order(&mdir)?;
            Some(KernelModules {
                version,
                dir: mdir,
                load_order,
            })
        };
        Ok(Kernel {
            vmlinuz: dir.join(KERNEL_FILE),
            key,
            dir,
            modules,
        })
    }
}

const KERNEL_FILE: &str = "vmlinuz";
const VERSION_FILE: &str = "version";

/// The package's one `boot/vmlinuz-<version>`.
fn find_vmlinuz(boot: &Path) -> Result<(PathBuf, String), ImageError> {
    let not_a_kernel = || ImageError::NotAKernel {
        path: boot.into(),
        expected: "one boot/vmlinuz-<version>",
    };
    let mut found = std::fs::read_dir(boot)
        .map_err(|_| not_a_kernel())?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version = name.strip_prefix("vmlinuz-")?.to_string();
            Some((e.path(), version))
        });
    let first = found.next().ok_or_else(not_a_kernel)?;
    if found.next().is_some() {
        return Err(not_a_kernel());
    }
    Ok(first)
}

/// The one `<version>` in `<root>/lib/modules/`.
fn only_module_version(root: &Path) -> Result<String, ImageError> {
    let dir = root.join("lib/modules");
    let not_modules = || ImageError::NotAKernel {
        path: dir.clone(),
        expected: "exactly one lib/modules/<version>/ directory",
    };
    let versions: Vec<String> = std::fs::read_dir(&dir)
        .map_err(|_| not_modules())?
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    match versions.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(not_modules()),
    }
}

/// A bzImage (`HdrS` at 0x202) or an ELF vmlinux.
fn check_kernel_file(path: &Path) -> Result<(), ImageError> {
    use std::io::Read;
    let mut head = [0u8; 0x206];
    let mut file = std::fs::File::open(path).map_err(io("open", path))?;
    let n = file.read(&mut head).map_err(io("read", path))?;
    let elf = n >= 4 && head[..4] == *b"\x7fELF";
    let bzimage = n >= 0x206 && head[0x202..0x206] == *b"HdrS";
    if elf || bzimage {
        Ok(())
    } else {
        Err(ImageError::NotAKernel {
            path: path.into(),
            expected: "a bzImage or an ELF vmlinux",
        })
    }
}

fn copy(from: &Path, to: &Path) -> Result<(), ImageError> {
    std::fs::copy(from, to).map_err(io("copy the kernel to", to))?;
    Ok(())
}

fn write_version(out: &Path, version: &str) -> Result<(), ImageError> {
    let path = out.join(VERSION_FILE);
    std::fs::write(&path, format!("{version}\n")).map_err(io("write", &path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoProgress;

    #[test]
    fn a_user_kernel_is_checked_stored_once_and_has_no_modules() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::new(dir.path());
        let bogus = dir.path().join("bogus");
        std::fs::write(&bogus, "not a kernel").unwrap();
        assert!(matches!(
            Kernel::from_file(&store, &bogus),
            Err(ImageError::NotAKernel { .. })
        ));
        let elf = dir.path().join("vmlinux");
        std::fs::write(&elf, b"\x7fELF\x02\x01\x01rest").unwrap();
        let k = Kernel::from_file(&store, &elf).unwrap();
        assert!(k.modules.is_none());
        assert_eq!(
            std::fs::read(&k.vmlinuz).unwrap(),
            std::fs::read(&elf).unwrap()
        );
        assert_eq!(Kernel::from_file(&store, &elf).unwrap(), k);
        // No scratch left behind.
        let tmp = store.scratch_parent();
        assert_eq!(std::fs::read_dir(tmp).unwrap().count(), 0);
        let _ = NoProgress;
    }
}
