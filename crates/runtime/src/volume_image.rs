//! Where a box's volume lives: one sparse ext4 image per box, the same file whichever
//! runtime boots it (a VM's virtio-blk disk, the sandbox's loop mount), so a box stopped on
//! one runtime starts on another with its disk.

use std::path::{Path, PathBuf};

use berth_protocol::BoxId;

/// The image's file name in the box's directory.
pub const VOLUME_IMAGE_NAME: &str = "volume.ext4";

/// `<data>/boxes/<id>/volume.ext4`.
pub fn volume_image(data_dir: &Path, id: &BoxId) -> PathBuf {
    data_dir
        .join("boxes")
        .join(id.to_string())
        .join(VOLUME_IMAGE_NAME)
}
