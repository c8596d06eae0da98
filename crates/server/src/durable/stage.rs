//! A volume image's copy as it is at one instant, for an upload that takes longer than the
//! box may be held still: a reflink where the host's file system can make one (XFS, btrfs:
//! instant, sharing the blocks until either side writes), else a copy of the image's data
//! extents only, its holes left holes (an ext4 host: the time of the data, not of the size).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// `FICLONE`: `_IOW(0x94, 9, int)`.
const FICLONE: libc::c_ulong = 0x4004_9409;

/// Writes `to` (created, mode 0600) as a copy of `from` as it is now.
pub fn stage(from: &Path, to: &Path) -> io::Result<()> {
    let src = File::open(from)?;
    let dst = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(to)?;
    // SAFETY: ioctl(2) FICLONE with two descriptors this function owns.
    let cloned = unsafe { libc::ioctl(dst.as_raw_fd(), FICLONE, src.as_raw_fd()) } == 0;
    if !cloned {
        copy_data_extents(&src, &dst)?;
    }
    Ok(())
}

/// Copies the data extents of `src` into `dst` at the same offsets, and makes `dst` as long.
fn copy_data_extents(src: &File, dst: &File) -> io::Result<()> {
    dst.set_len(src.metadata()?.len())?;
    for (offset, len) in data_extents(src)? {
        copy_range(src, dst, offset, len)?;
    }
    Ok(())
}

/// Where `file` holds data, as (offset, length) in order: its holes left out.
pub(crate) fn data_extents(file: &File) -> io::Result<Vec<(u64, u64)>> {
    let size = file.metadata()?.len();
    let mut extents = Vec::new();
    let mut at = 0u64;
    while at < size {
        let Some(data) = seek(file, at, libc::SEEK_DATA)? else {
            break; // only a hole is left
        };
        let hole = seek(file, data, libc::SEEK_HOLE)?.unwrap_or(size).min(size);
        extents.push((data, hole - data));
        at = hole;
    }
    Ok(extents)
}

/// `lseek(2)` with `whence`; `None` at ENXIO (no data past `from`).
fn seek(file: &File, from: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    // SAFETY: lseek(2) on a descriptor `file` owns.
    let at = unsafe { libc::lseek(file.as_raw_fd(), from as libc::off_t, whence) };
    if at >= 0 {
        return Ok(Some(at as u64));
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENXIO) {
        return Ok(None);
    }
    Err(err)
}

/// `len` bytes at `offset` of `src` to the same offset of `dst`, in the kernel.
fn copy_range(src: &File, dst: &File, offset: u64, len: u64) -> io::Result<()> {
    let (mut from, mut to) = (offset as libc::loff_t, offset as libc::loff_t);
    let mut left = len;
    while left > 0 {
        let step = left.min(1 << 30) as usize;
        // SAFETY: copy_file_range(2) between descriptors this module owns, with offsets
        // it owns.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                &mut from,
                dst.as_raw_fd(),
                &mut to,
                step,
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the image ended while it was copied",
            ));
        }
        left -= n as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom, Write};

    #[test]
    fn a_staged_copy_has_the_same_bytes_and_keeps_the_holes() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("volume.ext4");
        let to = dir.path().join("staged");
        let mut image = File::create(&from).unwrap();
        image.set_len(64 << 20).unwrap();
        for (at, byte) in [(0u64, 1u8), (20 << 20, 2), ((64 << 20) - 4096, 3)] {
            image.seek(SeekFrom::Start(at)).unwrap();
            image.write_all(&vec![byte; 4096]).unwrap();
        }
        drop(image);
        stage(&from, &to).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        File::open(&from).unwrap().read_to_end(&mut a).unwrap();
        File::open(&to).unwrap().read_to_end(&mut b).unwrap();
        assert!(a == b, "the staged copy differs");
        // Its holes stayed holes: far fewer blocks than its length.
        let blocks = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&to).unwrap());
        assert!(
            blocks * 512 < 8 << 20,
            "{blocks} blocks: the holes were filled"
        );
    }
}
