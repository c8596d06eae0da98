//! Reading a sparse image chunk by chunk without reading its holes: `SEEK_DATA` and
//! `SEEK_HOLE` give the extents that hold data, only those are read (into a zeroed
//! buffer), and a chunk without any, or whose data is all zeros, is no chunk at all.
//!
//! Reads are positioned (`pread`), so several chunks may be read at once from one file;
//! the seeks move the shared file offset, which no read uses.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::unistd::{lseek, Whence};

use crate::{ChunkError, CHUNK_SIZE};

/// An image opened for upload, with its size taken once: nobody writes it meanwhile.
pub(crate) struct Image {
    file: File,
    path: PathBuf,
    size: u64,
}

impl Image {
    pub(crate) fn open(path: &Path) -> Result<Image, ChunkError> {
        let io_error = |action| {
            move |source| ChunkError::Io {
                action,
                path: path.to_owned(),
                source,
            }
        };
        let file = File::open(path).map_err(io_error("open the image"))?;
        let meta = file.metadata().map_err(io_error("stat the image"))?;
        if !meta.is_file() {
            return Err(io_error("upload")(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            )));
        }
        Ok(Image {
            file,
            path: path.to_owned(),
            size: meta.len(),
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    pub(crate) fn chunk_count(&self) -> u64 {
        self.size.div_ceil(CHUNK_SIZE)
    }

    pub(crate) fn chunk_range(&self, index: u64) -> Range<u64> {
        let start = index * CHUNK_SIZE;
        start..(start + CHUNK_SIZE).min(self.size)
    }

    /// The bytes of chunk `index`, None when it is a hole or all zeros.
    pub(crate) fn read_chunk(&self, index: u64) -> Result<Option<Vec<u8>>, ChunkError> {
        let range = self.chunk_range(index);
        let io_error = |source| ChunkError::Io {
            action: "read the image",
            path: self.path.clone(),
            source,
        };
        let extents = data_extents(&self.file, range.clone()).map_err(io_error)?;
        if extents.is_empty() {
            return Ok(None);
        }
        let mut chunk = vec![0u8; (range.end - range.start) as usize];
        for extent in extents {
            let at = (extent.start - range.start) as usize;
            let into = &mut chunk[at..at + (extent.end - extent.start) as usize];
            self.file
                .read_exact_at(into, extent.start)
                .map_err(io_error)?;
        }
        Ok((!is_all_zero(&chunk)).then_some(chunk))
    }
}

/// The parts of `range` in `file` that hold data, in order. A file system without
/// `SEEK_DATA` reports it all as data, which costs reading zeros, not correctness.
fn data_extents(file: &File, range: Range<u64>) -> io::Result<Vec<Range<u64>>> {
    let mut extents = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let data = match lseek(file.as_raw_fd(), offset(at)?, Whence::SeekData) {
            Ok(data) => data as u64,
            // No data from `at` to the end of the file.
            Err(Errno::ENXIO) => break,
            Err(Errno::EINVAL) => {
                extents.push(at..range.end);
                break;
            }
            Err(e) => return Err(e.into()),
        };
        if data >= range.end {
            break;
        }
        let hole = lseek(file.as_raw_fd(), offset(data)?, Whence::SeekHole)? as u64;
        let end = hole.min(range.end);
        extents.push(data..end);
        at = end;
    }
    Ok(extents)
}

fn offset(at: u64) -> io::Result<i64> {
    i64::try_from(at).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset past 2^63"))
}

/// Whether every byte is zero, 64 at a time (a fold the compiler turns into vector ORs).
pub(crate) fn is_all_zero(bytes: &[u8]) -> bool {
    let mut blocks = bytes.chunks_exact(64);
    blocks
        .by_ref()
        .all(|block| block.iter().fold(0u8, |acc, &b| acc | b) == 0)
        && blocks.remainder().iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A file of `size` with `data` written at each offset; the rest is holes.
    fn sparse(dir: &Path, size: u64, data: &[(u64, &[u8])]) -> PathBuf {
        let path = dir.join("image");
        let file = File::create(&path).unwrap();
        file.set_len(size).unwrap();
        for (at, bytes) in data {
            file.write_all_at(bytes, *at).unwrap();
        }
        path
    }

    #[test]
    fn only_the_extents_with_data_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = sparse(
            dir.path(),
            64 * MIB,
            &[(MIB, &[7; 4096]), (9 * MIB, &[8; 4096])],
        );
        let file = File::open(&path).unwrap();
        let extents = data_extents(&file, 0..8 * MIB).unwrap();
        // File systems allocate in blocks; the extent covers the write and no hole.
        assert_eq!(extents.len(), 1, "{extents:?}");
        assert!(
            extents[0].start <= MIB && extents[0].end >= MIB + 4096,
            "{extents:?}"
        );
        assert!(extents[0].end - extents[0].start < MIB, "{extents:?}");
        assert_eq!(data_extents(&file, 16 * MIB..24 * MIB).unwrap(), []);
        assert_eq!(data_extents(&file, 60 * MIB..64 * MIB).unwrap(), []);
    }

    #[test]
    fn holes_and_zeros_are_no_chunk_and_data_reads_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let size = 3 * CHUNK_SIZE + 100;
        let zeros = vec![0u8; CHUNK_SIZE as usize];
        let path = sparse(
            dir.path(),
            size,
            &[
                (CHUNK_SIZE, &zeros),
                (2 * CHUNK_SIZE + 5, b"data"),
                (3 * CHUNK_SIZE + 99, b"z"),
            ],
        );
        let image = Image::open(&path).unwrap();
        assert_eq!(image.chunk_count(), 4);
        assert_eq!(image.read_chunk(0).unwrap(), None, "a hole");
        assert_eq!(image.read_chunk(1).unwrap(), None, "written zeros");
        let third = image.read_chunk(2).unwrap().unwrap();
        assert_eq!(third.len() as u64, CHUNK_SIZE);
        assert_eq!(&third[5..9], b"data");
        assert!(is_all_zero(&third[..5]) && is_all_zero(&third[9..]));
        let last = image.read_chunk(3).unwrap().unwrap();
        assert_eq!(last.len(), 100);
        assert_eq!(last[99], b'z');
    }

    #[test]
    fn zeros_are_told_from_any_set_byte() {
        assert!(is_all_zero(&[]));
        assert!(is_all_zero(&[0; 1000]));
        for at in [0, 63, 64, 999] {
            let mut bytes = vec![0u8; 1000];
            bytes[at] = 1;
            assert!(!is_all_zero(&bytes), "{at}");
        }
    }
}
