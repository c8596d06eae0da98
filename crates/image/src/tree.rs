//! Walking a directory tree in a stable order, and measuring it for an image's size.

use std::fs::Metadata;
use std::path::{Path, PathBuf};

use crate::error::io;
use crate::ImageError;

/// Every entry under `dir` (not `dir` itself), as (path relative to `dir`, metadata),
/// sorted by path, links not followed.
pub(crate) fn walk(dir: &Path, out: &mut Vec<(PathBuf, Metadata)>) -> Result<(), ImageError> {
    walk_rel(dir, Path::new(""), out)
}

fn walk_rel(root: &Path, rel: &Path, out: &mut Vec<(PathBuf, Metadata)>) -> Result<(), ImageError> {
    let dir = root.join(rel);
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .map_err(io("read the directory", &dir))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<Result<_, _>>()
        .map_err(io("read the directory", &dir))?;
    names.sort();
    for name in names {
        let rel = rel.join(name);
        let path = root.join(&rel);
        let meta = path.symlink_metadata().map_err(io("stat", &path))?;
        let is_dir = meta.is_dir();
        out.push((rel.clone(), meta));
        if is_dir {
            walk_rel(root, &rel, out)?;
        }
    }
    Ok(())
}

/// What a tree needs on an ext4 image.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TreeSize {
    /// File bytes, each file rounded up to 4 KiB blocks; each directory one block.
    pub bytes: u64,
    /// Entries (each takes an inode), the root included.
    pub inodes: u64,
}

const BLOCK: u64 = 4096;

/// Measures `dir` for [`crate::ext4_from_dir`]'s default size. Hard links count once.
pub fn measure(dir: &Path) -> Result<TreeSize, ImageError> {
    use std::os::unix::fs::MetadataExt;
    let mut entries = Vec::new();
    walk(dir, &mut entries)?;
    let mut seen = std::collections::HashSet::new();
    let mut size = TreeSize {
        bytes: BLOCK,
        inodes: 1,
    };
    for (_, meta) in entries {
        if meta.nlink() > 1 && !meta.is_dir() && !seen.insert((meta.dev(), meta.ino())) {
            continue;
        }
        size.inodes += 1;
        if meta.is_dir() {
            size.bytes += BLOCK;
        } else if meta.is_file() {
            size.bytes += meta.len().div_ceil(BLOCK) * BLOCK;
        } else if meta.file_type().is_symlink() && meta.len() >= 60 {
            // Targets of 60 bytes or more do not fit in the inode.
            size.bytes += BLOCK;
        }
    }
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_rounds_files_to_blocks_and_counts_hard_links_once() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("a")).unwrap();
        std::fs::write(d.join("a/one"), vec![1u8; 5000]).unwrap();
        std::fs::hard_link(d.join("a/one"), d.join("two")).unwrap();
        std::os::unix::fs::symlink("a/one", d.join("l")).unwrap();
        let s = measure(d).unwrap();
        // root + a + one (two is the same inode) + l
        assert_eq!(s.inodes, 4);
        // root block + a's block + 2 blocks of data
        assert_eq!(s.bytes, 4 * BLOCK);
    }
}
