//! berth's VM image builder: the guest kernel and its modules, the initramfs with
//! berth-init, template rootfs and shared layers as read-only ext4 images, and each box's
//! sparse ext4 volume. Every image is named by a hash of its inputs ([`ContentKey`]), built
//! under a scratch name and renamed into place: building twice does nothing, and a crash
//! leaves no half image.
//!
//! Blocking (it runs `apt-get`, `dpkg`, `depmod`, `mkfs.ext4`, `debootstrap`): call it from
//! `tokio::task::spawn_blocking` in async code. Host tools needed: e2fsprogs, kmod, dpkg,
//! apt, debootstrap (for the `debian` and `desktop` templates); see docs/images.md.

mod apt;
mod confine;
mod cpio;
mod desktop_image;
mod disk;
mod error;
mod ext4;
mod initramfs;
mod kernel;
mod key;
mod modules;
mod mount_points;
mod progress;
mod rootfs;
mod skeleton;
mod store;
mod tool;
mod tree;
mod vmlinux;
mod volume;
mod volume_check;
mod volume_read;
mod volume_reader;
mod volume_stock;
mod volume_usage;

pub use cpio::CpioWriter;
pub use desktop_image::{rootfs_desktop, DESKTOP_ADDITIONS, DESKTOP_PACKAGES};
pub use disk::{layer_image, DiskImage, LAYER_LABEL, ROOTFS_LABEL};
pub use error::ImageError;
pub use ext4::ext4_from_dir;
pub use initramfs::{build_initramfs, Initramfs, INIT_PATH};
pub use kernel::{Kernel, KernelModules, DEBIAN_CLOUD_KERNEL, VM_MODULES};
pub use key::{ContentKey, KeyBuilder, BUILDER_VERSION};
pub use mount_points::with_mount_points;
pub use progress::{NoProgress, Progress, TerminalProgress};
pub use rootfs::{
    rootfs_debian, rootfs_from_dir, rootfs_from_tarball, rootfs_minimal, Additions,
    BUSYBOX_PACKAGE, DEBIAN_MIRROR, DEBIAN_PACKAGES, DEBIAN_SUITE,
};
pub use store::ImageStore;
pub use tree::TreeSize;
pub use vmlinux::{vmlinux, VMLINUX_NAME};
pub use volume::{
    create_volume, create_volume_from_dir, ensure_volume, grow_mounted_volume, grow_volume,
    VolumeChange, BOX_USER_UID, MIN_VOLUME_MIB, VOLUME_LABEL,
};
pub use volume_check::{check_guest_written_volume, check_volume, FsckOutcome};
pub use volume_read::{read_volume, reader_main, READER_ARG};
pub use volume_stock::VolumeStock;
pub use volume_usage::{volume_usage, VolumeUsage};
