//! `berth image build`: the VM images, made in the data dir (`docs/images.md`): the kernel,
//! the initramfs holding `berth-init`, and the built-in templates' read-only rootfs images.
//! Content-addressed: building again reuses what is there. Works on the data dir directly,
//! like `berth up` (a running daemon is fine: images are renamed into place whole).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use berth_image::{
    build_initramfs, rootfs_debian, rootfs_minimal, DiskImage, ImageStore, Kernel,
    TerminalProgress, DEBIAN_PACKAGES, DEBIAN_SUITE,
};
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build (or reuse) the kernel, the initramfs and the VM templates' root filesystems.
    Build(BuildArgs),
}

#[derive(Debug, Args)]
#[command(after_help = "\
Needs the Debian tools ./scripts/install-deps.sh installs (e2fsprogs, kmod, debootstrap) and \
the Debian mirror (through apt). The kernel is Debian's cloud kernel unless --kernel names \
one. The `minimal` rootfs (busybox) takes seconds; the `debian` one (--debian: bookworm \
minbase with ca-certificates, curl, python3, procps, util-linux) takes minutes the first \
time. Each is built once and reused.")]
pub struct BuildArgs {
    /// Use this kernel (a bzImage or an ELF vmlinux, with its drivers built in) instead of
    /// Debian's cloud kernel.
    #[arg(long, value_name = "FILE")]
    pub kernel: Option<PathBuf>,
    /// Also build the `debian` template's rootfs.
    #[arg(long)]
    pub debian: bool,
}

pub fn run(command: ImageCommand, data_dir: &Path) -> anyhow::Result<u8> {
    match command {
        ImageCommand::Build(args) => build(args, data_dir),
    }
}

fn build(args: BuildArgs, data_dir: &Path) -> anyhow::Result<u8> {
    let init = berth_runtime::init_binary()?;
    let store = ImageStore::new(data_dir);
    let progress = TerminalProgress::new();
    let kernel = match &args.kernel {
        Some(path) => Kernel::from_file(&store, path),
        None => Kernel::debian_cloud(&store, &progress),
    }
    .context("building the kernel")?;
    let initramfs =
        build_initramfs(&store, &kernel, &init, &progress).context("building the initramfs")?;
    let mut rootfs = vec![(
        "minimal",
        rootfs_minimal(&store, &progress).context("building the minimal rootfs")?,
    )];
    if args.debian {
        let image = rootfs_debian(&store, DEBIAN_SUITE, DEBIAN_PACKAGES, &progress)
            .context("building the debian rootfs")?;
        rootfs.push(("debian", image));
    }
    println!("kernel     {}", kernel.vmlinuz.display());
    if let Some(modules) = &kernel.modules {
        println!(
            "           {} ({} modules)",
            modules.version,
            modules.load_order.len()
        );
    }
    println!("initramfs  {}", initramfs.path.display());
    for (name, image) in &rootfs {
        println!(
            "rootfs     {name}: {} ({})",
            image.path.display(),
            size(image)
        );
    }
    Ok(0)
}

fn size(image: &DiskImage) -> String {
    format!("{} MiB", image.size_bytes.div_ceil(1024 * 1024))
}
