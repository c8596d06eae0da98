//! `berth image build`: the VM images, made in the data dir (`docs/images.md`): the kernel,
//! the initramfs holding `berth-init`, and the built-in templates' read-only rootfs images.
//! Content-addressed: building again reuses what is there. Works on the data dir directly,
//! like `berth up` (a running daemon is fine: images are renamed into place whole).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use berth_image::{
    build_initramfs, rootfs_debian, rootfs_desktop, rootfs_from_dir, rootfs_from_tarball,
    rootfs_minimal, DiskImage, ImageStore, Kernel, Progress as _, TerminalProgress,
    DEBIAN_PACKAGES, DEBIAN_SUITE,
};
use berth_server::images::BuiltImages;
use berth_server::templates::{parse_template, templates_dir, Base};
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
time. The `desktop` one (Debian with Xvfb, XFCE, x11vnc and noVNC: about 1 GB and 4-6 \
minutes) is built only when asked for: --template desktop. Each is built once and reused.")]
pub struct BuildArgs {
    /// Use this kernel (a bzImage or an ELF vmlinux, with its drivers built in) instead of
    /// Debian's cloud kernel.
    #[arg(long, value_name = "FILE")]
    pub kernel: Option<PathBuf>,
    /// Also build the `debian` template's rootfs (as `--template debian`).
    #[arg(long)]
    pub debian: bool,
    /// Also build this template's rootfs (repeatable): a built-in (`minimal`, `debian`,
    /// `desktop`) or a user template in <data dir>/templates/NAME.toml whose base is an
    /// image (`debian:<suite>`, `desktop`, `dir:…`, `tarball:…`).
    #[arg(long, value_name = "NAME")]
    pub template: Vec<String>,
    /// Print what was built as JSON (the paths the daemon reads: kernel, vmlinux,
    /// initramfs, rootfs by base) instead of text.
    #[arg(long)]
    pub json: bool,
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
    progress.stage("extract the ELF kernel for Firecracker");
    // Only Firecracker needs it: a kernel it cannot be read from still serves QEMU.
    let vmlinux = match berth_image::vmlinux(&kernel) {
        Ok(path) => Some(path),
        Err(e) => {
            eprintln!("note: no ELF kernel for Firecracker: {e}");
            None
        }
    };
    let mut rootfs = vec![(
        "minimal".to_owned(),
        rootfs_minimal(&store, &progress).context("building the minimal rootfs")?,
    )];
    let mut templates = args.template.clone();
    if args.debian {
        templates.push("debian".into());
    }
    for name in &templates {
        let base = template_base(data_dir, name)?;
        let image = build_base(&store, &base, &progress)
            .with_context(|| format!("building the rootfs of template {name} ({base})"))?;
        rootfs.push((base.to_string(), image));
    }
    // What the daemon reads at start (it never downloads): the kernel, the initramfs and
    // each base's image.
    let mut built = BuiltImages::load(data_dir)?;
    built.kernel = Some(kernel.vmlinuz.clone());
    built.vmlinux = vmlinux.clone();
    built.initramfs = Some(initramfs.path.clone());
    for (base, image) in &rootfs {
        built.rootfs.insert(base.clone(), image.path.clone());
    }
    built.save(data_dir)?;
    crate::cmd_image_wait::for_the_daemon(data_dir)?;
    if args.json {
        crate::output::json(&mut std::io::stdout().lock(), &built)?;
        return Ok(0);
    }
    println!("kernel     {}", kernel.vmlinuz.display());
    if let Some(modules) = &kernel.modules {
        println!(
            "           {} ({} modules)",
            modules.version,
            modules.load_order.len()
        );
    }
    if let Some(path) = &vmlinux {
        println!("vmlinux    {} (Firecracker)", path.display());
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

/// The base of template `name`: a built-in's, else the user template file's.
fn template_base(data_dir: &Path, name: &str) -> anyhow::Result<Base> {
    let base = match name {
        "minimal" => Base::Minimal,
        "debian" => Base::Debian {
            suite: DEBIAN_SUITE.into(),
        },
        "desktop" => Base::Desktop,
        "host" | "echo" => {
            anyhow::bail!("template {name} runs on the host's /usr: it has no image to build")
        }
        _ => {
            let path = templates_dir(data_dir).join(format!("{name}.toml"));
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading template {name} ({})", path.display()))?;
            parse_template(&path, &text)?.base
        }
    };
    if !base.is_image() {
        anyhow::bail!(
            "template {name} has base {base}: it runs on the sandbox and has no image to build"
        );
    }
    Ok(base)
}

fn build_base(
    store: &ImageStore,
    base: &Base,
    progress: &TerminalProgress,
) -> anyhow::Result<DiskImage> {
    Ok(match base {
        Base::Host => anyhow::bail!("base host has no image"),
        Base::Minimal => rootfs_minimal(store, progress)?,
        Base::Debian { suite } => rootfs_debian(store, suite, DEBIAN_PACKAGES, progress)?,
        Base::Desktop => rootfs_desktop(store, progress)?,
        Base::Dir(dir) => rootfs_from_dir(store, dir, progress)?,
        Base::Tarball(file) => rootfs_from_tarball(store, file, progress)?,
    })
}

fn size(image: &DiskImage) -> String {
    format!("{} MiB", image.size_bytes.div_ceil(1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_bases_come_from_builtins_or_files_and_host_has_no_image() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(template_base(dir.path(), "minimal").unwrap(), Base::Minimal);
        assert_eq!(
            template_base(dir.path(), "debian").unwrap().to_string(),
            "debian"
        );
        assert_eq!(template_base(dir.path(), "desktop").unwrap(), Base::Desktop);
        let err = template_base(dir.path(), "host").unwrap_err().to_string();
        assert!(err.contains("no image to build"), "{err}");
        let templates = templates_dir(dir.path());
        std::fs::create_dir_all(&templates).unwrap();
        std::fs::write(
            templates.join("tree.toml"),
            "name = \"tree\"\nbase = \"dir:/srv/tree\"\n",
        )
        .unwrap();
        std::fs::write(templates.join("plain.toml"), "name = \"plain\"\n").unwrap();
        assert_eq!(
            template_base(dir.path(), "tree").unwrap(),
            Base::Dir("/srv/tree".into())
        );
        let err = template_base(dir.path(), "plain").unwrap_err().to_string();
        assert!(err.contains("runs on the sandbox"), "{err}");
        let err = format!("{:#}", template_base(dir.path(), "nope").unwrap_err());
        assert!(err.contains("nope.toml"), "{err}");
    }
}
