//! How much of a box volume image is in use, read without mounting it: the image's size,
//! the host blocks it takes (it is sparse), and the free space its ext4 superblock records.
//! The superblock's free count is exact for a stopped box; for a running one it is as of
//! the last time the file system wrote its superblock (mount, sync, unmount).

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::io;
use crate::ImageError;

const SUPERBLOCK_OFFSET: u64 = 1024;
const SUPERBLOCK_LEN: usize = 1024;
const EXT4_MAGIC: u16 = 0xEF53;
const INCOMPAT_64BIT: u32 = 0x80;
/// The journal holds transactions not yet written to the file system.
const INCOMPAT_RECOVER: u32 = 0x4;
/// `s_state`: cleanly unmounted; errors detected; orphans being recovered.
const STATE_VALID: u16 = 0x1;
const STATE_ERROR: u16 = 0x2;
const STATE_ORPHANS: u16 = 0x4;

/// One volume image's use, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VolumeUsage {
    /// The image's length: the file system's size.
    pub size_bytes: u64,
    /// What the image takes on the host's disk (blocks allocated to the sparse file).
    pub allocated_bytes: u64,
    /// What the box's user may still write (free blocks less root's reserve).
    pub free_bytes: u64,
}

/// Reads `image`'s use. Errors when it is missing or not an ext4 image.
pub fn volume_usage(image: &Path) -> Result<VolumeUsage, ImageError> {
    let (sb, meta) = superblock(image)?;
    let free = superblock_free(&sb).ok_or_else(|| ImageError::Invalid {
        what: "volume image",
        value: image.display().to_string(),
        why: "no ext4 superblock",
    })?;
    Ok(VolumeUsage {
        size_bytes: meta.len(),
        allocated_bytes: meta.blocks() * 512,
        free_bytes: free,
    })
}

/// Whether `image`'s superblock records a clean unmount: the valid flag set, no error, no
/// orphan list, and no journal left to replay. Anything unreadable or not ext4: `false`.
pub(crate) fn cleanly_unmounted(image: &Path) -> Result<bool, ImageError> {
    let Ok((sb, _)) = superblock(image) else {
        return Ok(false);
    };
    Ok(is_clean(&sb))
}

fn is_clean(sb: &[u8; SUPERBLOCK_LEN]) -> bool {
    let state = u16::from_le_bytes([sb[58], sb[59]]);
    let incompat = u32::from_le_bytes(sb[96..100].try_into().expect("4 bytes"));
    u16::from_le_bytes([sb[56], sb[57]]) == EXT4_MAGIC
        && state & STATE_VALID != 0
        && state & (STATE_ERROR | STATE_ORPHANS) == 0
        && incompat & INCOMPAT_RECOVER == 0
}

/// Whether `image`'s journal holds transactions not yet written to the file system (what
/// a crash or a kill leaves). Not ext4: `false` (the full check then refuses it).
pub(crate) fn needs_recovery(image: &Path) -> Result<bool, ImageError> {
    let (sb, _) = superblock(image)?;
    let incompat = u32::from_le_bytes(sb[96..100].try_into().expect("4 bytes"));
    Ok(u16::from_le_bytes([sb[56], sb[57]]) == EXT4_MAGIC && incompat & INCOMPAT_RECOVER != 0)
}

/// The superblock of `image` and the file's metadata.
fn superblock(image: &Path) -> Result<([u8; SUPERBLOCK_LEN], std::fs::Metadata), ImageError> {
    let mut file = std::fs::File::open(image).map_err(io("open", image))?;
    let meta = file.metadata().map_err(io("stat", image))?;
    let mut sb = [0u8; SUPERBLOCK_LEN];
    file.seek(SeekFrom::Start(SUPERBLOCK_OFFSET))
        .and_then(|_| file.read_exact(&mut sb))
        .map_err(io("read the superblock of", image))?;
    Ok((sb, meta))
}

/// Free bytes for an unprivileged user, from an ext4 superblock.
fn superblock_free(sb: &[u8; SUPERBLOCK_LEN]) -> Option<u64> {
    let u32_at = |at: usize| u32::from_le_bytes(sb[at..at + 4].try_into().expect("4 bytes"));
    if u16::from_le_bytes([sb[56], sb[57]]) != EXT4_MAGIC {
        return None;
    }
    let log_block = u32_at(24);
    if log_block > 6 {
        return None;
    }
    let block = 1024u64 << log_block;
    let wide = u32_at(96) & INCOMPAT_64BIT != 0;
    let count = |lo: usize, hi: usize| {
        let high = if wide { u64::from(u32_at(hi)) } else { 0 };
        high << 32 | u64::from(u32_at(lo))
    };
    let free = count(12, 0x158);
    let reserved = count(8, 0x154);
    Some(free.saturating_sub(reserved) * block)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_fresh_volume_and_sees_a_file_written_into_it() {
        if crate::tool::MKFS_EXT4.locate().is_err() {
            berth_testkit::skip(
                "e2fsprogs",
                "mkfs.ext4 is not installed (apt-get install e2fsprogs)",
            );
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let image = tmp.path().join("volume.ext4");
        crate::create_volume(&image, 64).unwrap();
        let fresh = volume_usage(&image).unwrap();
        assert_eq!(fresh.size_bytes, 64 << 20);
        assert!(fresh.allocated_bytes < fresh.size_bytes / 2, "{fresh:?}");
        assert!(
            fresh.free_bytes > 40 << 20 && fresh.free_bytes < fresh.size_bytes,
            "{fresh:?}"
        );

        // 8 MiB more through debugfs (no mount needed): the free count drops by about that.
        let data = tmp.path().join("data");
        std::fs::write(&data, vec![7u8; 8 << 20]).unwrap();
        crate::ext4::debugfs_write(&image, &format!("write {} /home/data\n", data.display()))
            .unwrap();
        let used = volume_usage(&image).unwrap();
        let dropped = fresh.free_bytes - used.free_bytes;
        assert!(
            (8 << 20..9 << 20).contains(&dropped),
            "free dropped by {dropped}"
        );
        assert!(used.allocated_bytes >= fresh.allocated_bytes + (8 << 20));
    }

    #[test]
    fn a_volume_has_inodes_for_many_files() {
        if crate::tool::MKFS_EXT4.locate().is_err() {
            berth_testkit::skip(
                "e2fsprogs",
                "mkfs.ext4 is not installed (apt-get install e2fsprogs)",
            );
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let image = tmp.path().join("volume.ext4");
        crate::create_volume(&image, 1024).unwrap();
        let mut sb = [0u8; SUPERBLOCK_LEN];
        let mut file = std::fs::File::open(&image).unwrap();
        file.seek(SeekFrom::Start(SUPERBLOCK_OFFSET)).unwrap();
        file.read_exact(&mut sb).unwrap();
        let inodes = u32::from_le_bytes(sb[0..4].try_into().unwrap());
        assert!(inodes >= 65_536, "a 1 GiB volume has {inodes} inodes");
    }

    #[test]
    fn only_a_cleanly_unmounted_superblock_is_clean() {
        if crate::tool::MKFS_EXT4.locate().is_err() {
            berth_testkit::skip(
                "e2fsprogs",
                "mkfs.ext4 is not installed (apt-get install e2fsprogs)",
            );
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let image = tmp.path().join("volume.ext4");
        crate::create_volume(&image, 64).unwrap();
        assert!(cleanly_unmounted(&image).unwrap());
        let (sb, _) = superblock(&image).unwrap();
        let set = |at: usize, bytes: &[u8]| {
            let mut sb = sb;
            sb[at..at + bytes.len()].copy_from_slice(bytes);
            sb
        };
        let state = u16::from_le_bytes([sb[58], sb[59]]);
        let incompat = u32::from_le_bytes(sb[96..100].try_into().unwrap());
        for (what, dirty) in [
            ("mounted", set(58, &(state & !STATE_VALID).to_le_bytes())),
            ("errors", set(58, &(state | STATE_ERROR).to_le_bytes())),
            ("orphans", set(58, &(state | STATE_ORPHANS).to_le_bytes())),
            (
                "journal",
                set(96, &(incompat | INCOMPAT_RECOVER).to_le_bytes()),
            ),
            ("not ext4", set(56, &[0, 0])),
        ] {
            assert!(!is_clean(&dirty), "{what}");
        }
        assert!(!cleanly_unmounted(&tmp.path().join("missing")).unwrap());
    }

    #[test]
    fn refuses_what_is_not_ext4() {
        let tmp = tempfile::tempdir().unwrap();
        let junk = tmp.path().join("junk");
        std::fs::write(&junk, vec![0u8; 4096]).unwrap();
        assert!(matches!(
            volume_usage(&junk),
            Err(ImageError::Invalid { .. })
        ));
        assert!(matches!(
            volume_usage(&tmp.path().join("missing")),
            Err(ImageError::Io { .. })
        ));
    }
}
