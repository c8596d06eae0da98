//! Where a box's volume lives: one sparse ext4 image per box, the same file whichever
//! runtime boots it (a VM's virtio-blk disk, the sandbox's loop mount), so a box stopped on
//! one runtime starts on another with its disk.
//!
//! And whether the host may believe what the image says about itself. A VM's guest root
//! can write any byte of it; the sandbox's writes all go through the host kernel's own
//! ext4. So a marker beside the image, in the host-only box dir, says "a guest may have
//! written this since the host last checked it in full": written (and fsync'd) before
//! every VM boot, removed only when the full check passes. While it is there, nothing on
//! the host mounts, grows or reads the image before that check
//! ([`check_if_guest_written`]). A sandbox that crashes leaves no marker: its journal
//! is the host kernel's, and the routine `e2fsck -p` (confined) replays it.

use std::io::Write;
use std::path::{Path, PathBuf};

use berth_protocol::BoxId;

use crate::RuntimeError;

/// The image's file name in the box's directory.
pub const VOLUME_IMAGE_NAME: &str = "volume.ext4";
/// The marker's file name in the box's directory.
pub const GUEST_WRITTEN_MARKER: &str = "volume.guest-written";

/// `<data>/boxes/<id>/volume.ext4`.
pub fn volume_image(data_dir: &Path, id: &BoxId) -> PathBuf {
    data_dir
        .join("boxes")
        .join(id.to_string())
        .join(VOLUME_IMAGE_NAME)
}

/// Records that a guest is about to get `image` as a writable disk: call before every VM
/// boot. Durable before it returns (the file and its directory fsync'd), so a host crash
/// during the boot cannot forget it.
pub fn mark_guest_written(image: &Path) -> Result<(), RuntimeError> {
    let marker = marker_of(image);
    let io = |action| {
        let marker = marker.clone();
        move |source| RuntimeError::Io {
            action,
            path: marker,
            source,
        }
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&marker)
        .map_err(io("create the guest-written marker"))?;
    file.write_all(b"a VM's guest may have written volume.ext4 since the host last checked it\n")
        .and_then(|()| file.sync_all())
        .map_err(io("write the guest-written marker"))?;
    sync_dir(&marker).map_err(io("sync the directory of"))
}

/// Whether a guest may have written `image` since its last full check.
pub fn is_guest_written(image: &Path) -> bool {
    marker_of(image).exists()
}

/// Blocking. When a guest may have written `image`, checks it in full
/// ([`berth_image::check_guest_written_volume`]: confined, read-only, the image left as it
/// was on refusal) and forgets the marker once it passes. Nothing to do otherwise.
pub fn check_if_guest_written(image: &Path) -> Result<(), berth_image::ImageError> {
    if !is_guest_written(image) {
        return Ok(());
    }
    if image.exists() {
        berth_image::check_guest_written_volume(image)?;
    }
    let marker = marker_of(image);
    let io = |action| {
        let marker = marker.clone();
        move |source| berth_image::ImageError::Io {
            action,
            path: marker,
            source,
        }
    };
    std::fs::remove_file(&marker).map_err(io("remove the guest-written marker"))?;
    sync_dir(&marker).map_err(io("sync the directory of"))
}

fn marker_of(image: &Path) -> PathBuf {
    image.with_file_name(GUEST_WRITTEN_MARKER)
}

fn sync_dir(file: &Path) -> std::io::Result<()> {
    std::fs::File::open(file.parent().unwrap_or(Path::new("."))).and_then(|d| d.sync_all())
}
