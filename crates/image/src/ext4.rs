//! ext4 images made from a directory with `mkfs.ext4 -d` (no mount, no root needed for the
//! copy itself): owners, modes, links, device nodes and hard links come from the source.

use std::path::Path;

use crate::error::io;
use crate::tool::{DEBUGFS, MKFS_EXT4};
use crate::tree::{measure, TreeSize};
use crate::ImageError;

const MIB: u64 = 1024 * 1024;
/// ext4's longest volume label.
const MAX_LABEL: usize = 16;
/// Room for the superblock copies, group descriptors, bitmaps and lost+found beyond what
/// the inode tables and data need.
const SLACK: u64 = 8 * MIB;
const INODE_SIZE: u64 = 256;

/// Makes `out` an ext4 image of `dir`'s contents with `label` and a journal. `size_mib`
/// `None` sizes it from the tree (see [`default_size_mib`]). Returns the image's size in
/// bytes. `out` is replaced.
pub fn ext4_from_dir(
    dir: &Path,
    out: &Path,
    label: &str,
    size_mib: Option<u64>,
) -> Result<u64, ImageError> {
    make(dir, out, label, size_mib, Journal::Yes)
}

/// Whether an image gets a journal: read-only images need none (it would be 4–64 MiB of
/// nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Journal {
    Yes,
    No,
}

pub(crate) fn make(
    dir: &Path,
    out: &Path,
    label: &str,
    size_mib: Option<u64>,
    journal: Journal,
) -> Result<u64, ImageError> {
    check_label(label)?;
    let tree = measure(dir)?;
    let size_mib = match size_mib {
        Some(s) => s,
        None => default_size_mib(tree, journal),
    };
    let bytes = size_mib * MIB;
    // A sparse file: only what mkfs writes takes space.
    let _ = std::fs::remove_file(out);
    let file = std::fs::File::create(out).map_err(io("create", out))?;
    file.set_len(bytes).map_err(io("size", out))?;
    drop(file);
    let mut cmd = MKFS_EXT4.command()?;
    cmd.args(["-q", "-F", "-T", "default", "-b", "4096", "-L", label])
        .args(["-N", &inode_count(tree, bytes, journal).to_string()])
        .args(["-E", "root_owner=0:0"]);
    match journal {
        // Reserve a little for root on a writable disk (berth-init's own state), none on a
        // read-only one.
        Journal::Yes => cmd.args(["-m", "1"]),
        Journal::No => cmd.args(["-m", "0", "-O", "^has_journal"]),
    };
    cmd.arg("-d").arg(dir).arg(out);
    if let Err(e) = MKFS_EXT4.run(&mut cmd) {
        let _ = std::fs::remove_file(out);
        return Err(e);
    }
    Ok(bytes)
}

/// The size picked for a tree: its data (files rounded to 4 KiB blocks) × 1.2, plus the
/// inode tables (256 bytes per inode, [`inodes`] of them), 8 MiB for the rest of the
/// metadata, and the journal mkfs makes for that size when there is one; rounded up to a
/// MiB.
pub(crate) fn default_size_mib(tree: TreeSize, journal: Journal) -> u64 {
    let data = tree.bytes + tree.bytes / 5;
    let mut bytes = data + inodes(tree) * INODE_SIZE + SLACK;
    if journal == Journal::Yes {
        bytes += journal_bytes(bytes);
    }
    bytes.div_ceil(MIB)
}

/// Inodes for a tree: its entries × 1.2 plus 1024 spare (a layer can be rebuilt; the
/// spare is for the few files berth adds).
fn inodes(tree: TreeSize) -> u64 {
    tree.inodes + tree.inodes / 5 + 1024
}

/// Inodes for an image of `bytes` holding `tree`. A read-only image needs only the tree's
/// ([`inodes`]); a writable one (a box volume) also gets mke2fs's default of one inode per
/// 16 KiB, so the box can make as many files as a disk of that size usually holds (the
/// tree alone gave a 1 GiB volume 1152 inodes).
fn inode_count(tree: TreeSize, bytes: u64, journal: Journal) -> u64 {
    match journal {
        Journal::No => inodes(tree),
        Journal::Yes => inodes(tree).max(bytes / BYTES_PER_INODE),
    }
}

/// mke2fs's default inode ratio (`-T default`).
const BYTES_PER_INODE: u64 = 16 * 1024;

/// mke2fs's default journal size for a file system of `bytes` (4 KiB blocks).
fn journal_bytes(bytes: u64) -> u64 {
    match bytes / 4096 {
        b if b < 32_768 => 4 * MIB,
        b if b < 256 * 1024 => 16 * MIB,
        b if b < 512 * 1024 => 32 * MIB,
        b if b < 4096 * 1024 => 64 * MIB,
        _ => 256 * MIB,
    }
}

fn check_label(label: &str) -> Result<(), ImageError> {
    if label.is_empty() || label.len() > MAX_LABEL || !label.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ImageError::Invalid {
            what: "ext4 label",
            value: label.into(),
            why: "1 to 16 printable ASCII characters, no spaces",
        });
    }
    Ok(())
}

/// Runs debugfs `commands` on `image` in write mode. debugfs exits 0 even when a command
/// fails, so anything it prints on stderr (beyond its banner) is an error.
pub(crate) fn debugfs_write(image: &Path, commands: &str) -> Result<(), ImageError> {
    let mut cmd = DEBUGFS.command()?;
    cmd.args(["-w", "-f", "-"]).arg(image);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(|source| ImageError::Spawn {
        tool: DEBUGFS.name,
        source,
    })?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        stdin
            .write_all(commands.as_bytes())
            .map_err(io("send commands to debugfs for", image))?;
    }
    let out = child
        .wait_with_output()
        .map_err(io("run debugfs on", image))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("debugfs ") && !l.trim().is_empty())
        .collect();
    if out.status.success() && errors.is_empty() {
        return Ok(());
    }
    Err(ImageError::ToolFailed {
        command: crate::tool::describe(&cmd),
        status: out.status,
        stderr: errors.join(" | "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_size_covers_data_inodes_and_journal() {
        let tree = TreeSize {
            bytes: 100 * MIB,
            inodes: 10_000,
        };
        let ro = default_size_mib(tree, Journal::No);
        // 120 MiB data + ~3.4 MiB inode tables + 8 MiB slack.
        assert_eq!(ro, 132);
        let rw = default_size_mib(tree, Journal::Yes);
        assert_eq!(rw, ro + 16);
        let empty = default_size_mib(TreeSize::default(), Journal::No);
        assert!((8..=9).contains(&empty), "{empty}");
    }

    #[test]
    fn labels_are_checked() {
        for bad in ["", "has space", "seventeen-chars-x"] {
            assert!(check_label(bad).is_err(), "{bad}");
        }
        check_label("berth-root").unwrap();
    }
}
