//! Builds the kernel, the initramfs and the minimal rootfs into a data dir and prints their
//! paths, with a terminal progress bar: a stand-in for `berth image build` until the CLI
//! has it.
//!
//! cargo run -p berth-image --example image_build -- <data-dir> <static berth-init> [volume.ext4]
//!
//! With a third argument, also makes (or grows to) a 256 MiB box volume there.

use std::path::PathBuf;
use std::process::ExitCode;

use berth_image::{
    build_initramfs, ensure_volume, rootfs_minimal, ImageStore, Kernel, TerminalProgress,
};

const VOLUME_MIB: u64 = 256;

fn main() -> ExitCode {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let (data, init, volume) = match args.as_slice() {
        [data, init] => (data, init, None),
        [data, init, volume] => (data, init, Some(volume)),
        _ => {
            eprintln!("usage: image_build <data-dir> <static berth-init> [volume.ext4]");
            return ExitCode::from(2);
        }
    };
    let store = ImageStore::new(data);
    let progress = TerminalProgress::new();
    let result = (|| {
        let kernel = Kernel::debian_cloud(&store, &progress)?;
        let initramfs = build_initramfs(&store, &kernel, init, &progress)?;
        let rootfs = rootfs_minimal(&store, &progress)?;
        if let Some(volume) = volume {
            ensure_volume(volume, VOLUME_MIB)?;
        }
        Ok::<_, berth_image::ImageError>((kernel, initramfs, rootfs))
    })();
    match result {
        Ok((kernel, initramfs, rootfs)) => {
            println!("kernel    {}", kernel.vmlinuz.display());
            if let Some(m) = &kernel.modules {
                println!("version   {}", m.version);
            }
            println!("initramfs {}", initramfs.path.display());
            println!("rootfs    {}", rootfs.path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            let mut msg = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}
