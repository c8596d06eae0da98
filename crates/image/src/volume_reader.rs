//! The child side of reading a sleeping box's `/memory` from its volume image: what the
//! confined reader process (`volume_read.rs` starts it) does with the image, through
//! `ext4-view`, a pure-Rust read-only ext4 reader. The image may have been written byte by
//! byte by a VM's guest root, so it is parsed here, in a process that can do nothing else,
//! never by a host mount.
//!
//! Nothing is followed: a symlink anywhere on a path is refused, so an answer only ever
//! holds what is under `/memory` itself. Walks are bounded in entries and depth (a hostile
//! image can hard-link a directory into itself).

use std::io::Write;

use berth_protocol::guest::FileKind;
use berth_protocol::memory::{
    memory_path, steps, MemoryEntry, MemorySource, MemoryTree, VolumeRead, VolumeReadFailure,
    VolumeReadFailureKind as Why, MAX_TREE_DEPTH, MAX_TREE_ENTRIES, MEMORY_ROOT,
};
use ext4_view::{Ext4, Ext4Error, FileType, Metadata};

/// How much of a file one read takes.
const READ_CHUNK: usize = 64 * 1024;

/// Answers `request` from the ext4 image `fs`, writing the answer to `out`.
pub fn answer(
    fs: &Ext4,
    request: &VolumeRead,
    out: &mut dyn Write,
) -> Result<(), VolumeReadFailure> {
    match request {
        VolumeRead::Tree { path } => {
            let tree = tree(fs, &checked(path)?)?;
            serde_json::to_writer(&mut *out, &tree).map_err(|e| output_failed(&e))?;
        }
        VolumeRead::File { path, max_bytes } => read_file(fs, &checked(path)?, *max_bytes, out)?,
        VolumeRead::Export { max_bytes } => export(fs, *max_bytes, out)?,
    }
    out.flush().map_err(|e| output_failed(&e))
}

/// Loads the ext4 file system of the image `file`.
pub fn load_file(file: std::fs::File) -> Result<Ext4, VolumeReadFailure> {
    Ext4::load(Box::new(file)).map_err(|e| failure(&e, ""))
}

/// The walk below `rel` (relative to `/memory`): parents before children, names sorted.
fn tree(fs: &Ext4, rel: &str) -> Result<MemoryTree, VolumeReadFailure> {
    let top = plain_metadata(fs, rel)?;
    if !top.is_dir() {
        return Err(VolumeReadFailure {
            kind: Why::NotADirectory,
            message: format!("/memory/{rel} is not a directory"),
        });
    }
    let mut tree = MemoryTree {
        source: MemorySource::Volume,
        entries: Vec::new(),
        truncated: false,
    };
    walk(fs, rel, 0, &mut tree)?;
    Ok(tree)
}

/// Depth first: each entry, then (for a directory) everything below it, before the next.
fn walk(
    fs: &Ext4,
    dir: &str,
    depth: usize,
    tree: &mut MemoryTree,
) -> Result<(), VolumeReadFailure> {
    if depth >= MAX_TREE_DEPTH {
        tree.truncated = true;
        return Ok(());
    }
    let mut names = Vec::new();
    for entry in fs
        .read_dir(absolute(dir).as_str())
        .map_err(|e| failure(&e, dir))?
    {
        let entry = entry.map_err(|e| failure(&e, dir))?;
        let Ok(name) = entry.file_name().as_str().map(str::to_owned) else {
            continue; // not UTF-8: no path of the API could name it
        };
        if name != "." && name != ".." {
            names.push(name);
        }
        if names.len() > MAX_TREE_ENTRIES {
            break; // the tree is cut below anyway: a huge directory is not read whole
        }
    }
    names.sort();
    for name in names {
        if tree.entries.len() >= MAX_TREE_ENTRIES {
            tree.truncated = true;
            return Ok(());
        }
        let path = if dir.is_empty() {
            name
        } else {
            format!("{dir}/{name}")
        };
        let meta = fs
            .symlink_metadata(absolute(&path).as_str())
            .map_err(|e| failure(&e, &path))?;
        let kind = kind_of(meta.file_type());
        let target = (kind == FileKind::Symlink)
            .then(|| fs.read_link(absolute(&path).as_str()).ok())
            .flatten()
            .map(|t| String::from_utf8_lossy(t.as_ref()).into_owned());
        tree.entries.push(MemoryEntry {
            size: if kind == FileKind::Dir { 0 } else { meta.len() },
            path: path.clone(),
            kind,
            modified: None,
            target,
        });
        if kind == FileKind::Dir {
            walk(fs, &path, depth + 1, tree)?;
        }
    }
    Ok(())
}

/// All of `/memory` as a tar: its directories and regular files, as the walk of [`tree`]
/// finds them (bounded the same way; a cut tree is refused, not half exported).
fn export(fs: &Ext4, max_bytes: u64, out: &mut dyn Write) -> Result<(), VolumeReadFailure> {
    let tree = tree(fs, "")?;
    if tree.truncated {
        return Err(VolumeReadFailure {
            kind: Why::TooLarge,
            message: format!(
                "/memory holds more than {MAX_TREE_ENTRIES} entries or is deeper than {MAX_TREE_DEPTH}"
            ),
        });
    }
    let total: u64 = tree
        .entries
        .iter()
        .filter(|e| e.kind == FileKind::File)
        .map(|e| e.size)
        .sum();
    if total > max_bytes {
        return Err(VolumeReadFailure {
            kind: Why::TooLarge,
            message: format!("/memory holds {total} bytes of files, more than {max_bytes}"),
        });
    }
    let mut tar = tar::Builder::new(out);
    for entry in &tree.entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        match entry.kind {
            FileKind::Dir => {
                header.set_entry_type(tar::EntryType::Directory);
                header.set_mode(0o755);
                header.set_size(0);
                tar.append_data(&mut header, &entry.path, std::io::empty())
                    .map_err(|e| output_failed(&e))?;
            }
            FileKind::File => {
                let mut content = Vec::with_capacity(entry.size as usize);
                read_file(fs, &entry.path, entry.size, &mut content)?;
                header.set_entry_type(tar::EntryType::Regular);
                header.set_mode(0o644);
                header.set_size(content.len() as u64);
                tar.append_data(&mut header, &entry.path, &content[..])
                    .map_err(|e| output_failed(&e))?;
            }
            _ => {}
        }
    }
    tar.finish().map_err(|e| output_failed(&e))
}

/// Writes the regular file at `rel` to `out`, if it is at most `max_bytes` long.
fn read_file(
    fs: &Ext4,
    rel: &str,
    max_bytes: u64,
    out: &mut dyn Write,
) -> Result<(), VolumeReadFailure> {
    let meta = plain_metadata(fs, rel)?;
    if meta.is_dir() {
        return Err(VolumeReadFailure {
            kind: Why::IsADirectory,
            message: format!("/memory/{rel} is a directory"),
        });
    }
    if !meta.file_type().is_regular_file() {
        return Err(not_regular(rel));
    }
    if meta.len() > max_bytes {
        return Err(VolumeReadFailure {
            kind: Why::TooLarge,
            message: format!(
                "/memory/{rel} has {} bytes, more than the {max_bytes} a read answers",
                meta.len()
            ),
        });
    }
    let mut file = fs
        .open(absolute(rel).as_str())
        .map_err(|e| failure(&e, rel))?;
    let mut buf = vec![0u8; READ_CHUNK];
    let mut left = meta.len();
    while left > 0 {
        let n = file.read_bytes(&mut buf).map_err(|e| failure(&e, rel))?;
        if n == 0 {
            break;
        }
        let n = n.min(usize::try_from(left).unwrap_or(usize::MAX));
        out.write_all(&buf[..n]).map_err(|e| output_failed(&e))?;
        left -= n as u64;
    }
    Ok(())
}

/// The metadata of `/memory/rel`, refusing a symlink at any step of the way (the walk
/// from the image's root checks each component without following it).
fn plain_metadata(fs: &Ext4, rel: &str) -> Result<Metadata, VolumeReadFailure> {
    let mut meta = None;
    for step in steps(rel) {
        let m = fs
            .symlink_metadata(absolute(&step).as_str())
            .map_err(|e| failure(&e, &step))?;
        if m.is_symlink() {
            return Err(VolumeReadFailure::symlink(&step));
        }
        meta = Some(m);
    }
    Ok(meta.expect("the steps start at /memory itself"))
}

fn checked(raw: &str) -> Result<String, VolumeReadFailure> {
    memory_path(raw).map_err(|why| VolumeReadFailure {
        kind: Why::BadPath,
        message: format!("the memory path {raw:?} {why}"),
    })
}

fn absolute(rel: &str) -> String {
    if rel.is_empty() {
        MEMORY_ROOT.to_owned()
    } else {
        format!("{MEMORY_ROOT}/{rel}")
    }
}

fn kind_of(t: FileType) -> FileKind {
    if t.is_regular_file() {
        FileKind::File
    } else if t.is_dir() {
        FileKind::Dir
    } else if t.is_symlink() {
        FileKind::Symlink
    } else {
        FileKind::Other
    }
}

fn not_regular(rel: &str) -> VolumeReadFailure {
    VolumeReadFailure {
        kind: Why::NotARegularFile,
        message: format!("/memory/{rel} is not a regular file"),
    }
}

fn failure(e: &Ext4Error, rel: &str) -> VolumeReadFailure {
    let kind = match e {
        Ext4Error::NotFound => Why::NotFound,
        Ext4Error::IsADirectory => Why::IsADirectory,
        Ext4Error::NotADirectory => Why::NotADirectory,
        Ext4Error::IsASpecialFile => Why::NotARegularFile,
        _ => Why::Unreadable,
    };
    let message = match kind {
        Why::NotFound => format!("/memory/{rel} does not exist"),
        Why::Unreadable => format!("the box's volume image cannot be read: {e}"),
        _ => format!("/memory/{rel}: {e}"),
    };
    VolumeReadFailure { kind, message }
}

fn output_failed(e: &dyn std::fmt::Display) -> VolumeReadFailure {
    VolumeReadFailure {
        kind: Why::Unreadable,
        message: format!("cannot write the answer: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn skip() -> bool {
        let skip = crate::tool::MKFS_EXT4.locate().is_err();
        if skip {
            berth_testkit::skip("e2fsprogs", "mkfs.ext4 is not installed");
        }
        skip
    }

    /// An image whose root holds `memory/` as a box's volume does, and `home/` beside it.
    fn image_of(dir: &Path) -> PathBuf {
        let tree = dir.join("tree");
        let memory = tree.join("memory");
        std::fs::create_dir_all(memory.join("entities")).unwrap();
        std::fs::create_dir_all(memory.join("timeline/2026")).unwrap();
        std::fs::create_dir_all(tree.join("home/user")).unwrap();
        std::fs::write(memory.join("README.md"), "persistent memory of [[user]]\n").unwrap();
        std::fs::write(memory.join("entities/alice.md"), "Alice likes tea.\n").unwrap();
        std::fs::write(memory.join("timeline/2026/12-04.md"), vec![b'x'; 200_000]).unwrap();
        std::fs::write(tree.join("home/user/secret"), "not memory").unwrap();
        std::os::unix::fs::symlink("/home/user/secret", memory.join("escape")).unwrap();
        std::os::unix::fs::symlink("../home", memory.join("up")).unwrap();
        let image = dir.join("volume.ext4");
        crate::ext4_from_dir(&tree, &image, "berth-vol", Some(16)).unwrap();
        image
    }

    fn fs_of(image: &Path) -> Ext4 {
        load_file(std::fs::File::open(image).unwrap()).unwrap()
    }

    fn ask(fs: &Ext4, request: VolumeRead) -> Result<Vec<u8>, VolumeReadFailure> {
        let mut out = Vec::new();
        answer(fs, &request, &mut out).map(|()| out)
    }

    fn file(path: &str) -> VolumeRead {
        VolumeRead::File {
            path: path.into(),
            max_bytes: 1 << 20,
        }
    }

    #[test]
    fn the_tree_lists_memory_depth_first_and_symlinks_unfollowed() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_of(&image_of(dir.path()));
        let out = ask(
            &fs,
            VolumeRead::Tree {
                path: String::new(),
            },
        )
        .unwrap();
        let tree: MemoryTree = serde_json::from_slice(&out).unwrap();
        let paths: Vec<_> = tree.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "README.md",
                "entities",
                "entities/alice.md",
                "escape",
                "timeline",
                "timeline/2026",
                "timeline/2026/12-04.md",
                "up"
            ]
        );
        assert!(!tree.truncated);
        assert_eq!(tree.source, MemorySource::Volume);
        let escape = tree.entries.iter().find(|e| e.path == "escape").unwrap();
        assert_eq!(escape.kind, FileKind::Symlink);
        assert_eq!(escape.target.as_deref(), Some("/home/user/secret"));
        let big = tree
            .entries
            .iter()
            .find(|e| e.path.ends_with("12-04.md"))
            .unwrap();
        assert_eq!((big.kind, big.size), (FileKind::File, 200_000));
        let sub: MemoryTree = serde_json::from_slice(
            &ask(
                &fs,
                VolumeRead::Tree {
                    path: "/memory/timeline".into(),
                },
            )
            .unwrap(),
        )
        .unwrap();
        let paths: Vec<_> = sub.entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["timeline/2026", "timeline/2026/12-04.md"]);
    }

    #[test]
    fn a_file_is_read_whole_and_nothing_outside_memory_is() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_of(&image_of(dir.path()));
        assert_eq!(
            ask(&fs, file("entities/alice.md")).unwrap(),
            b"Alice likes tea.\n"
        );
        assert_eq!(
            ask(&fs, file("timeline/2026/12-04.md")).unwrap(),
            vec![b'x'; 200_000]
        );
        let why = |path: &str| ask(&fs, file(path)).unwrap_err().kind;
        assert_eq!(why("escape"), Why::NotARegularFile);
        assert_eq!(why("up/user/secret"), Why::NotARegularFile);
        assert_eq!(why("../home/user/secret"), Why::BadPath);
        assert_eq!(why("entities"), Why::IsADirectory);
        assert_eq!(why("entities/bob.md"), Why::NotFound);
        assert_eq!(why("README.md/x"), Why::NotADirectory);
        let small = VolumeRead::File {
            path: "timeline/2026/12-04.md".into(),
            max_bytes: 199_999,
        };
        assert_eq!(ask(&fs, small).unwrap_err().kind, Why::TooLarge);
        let not_dir = VolumeRead::Tree {
            path: "README.md".into(),
        };
        assert_eq!(ask(&fs, not_dir).unwrap_err().kind, Why::NotADirectory);
    }

    /// Damage anywhere in the image's metadata is an error or an answer, never a panic (a
    /// guest root may write any bytes): 300 images, each with 64 bytes of its first 1 MiB
    /// overwritten at random.
    #[test]
    fn an_export_is_a_tar_of_memory_without_its_symlinks() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let fs = fs_of(&image_of(dir.path()));
        let tar = ask(&fs, VolumeRead::Export { max_bytes: 1 << 20 }).unwrap();
        let mut archive = tar::Archive::new(&tar[..]);
        let mut got = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut content = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut content).unwrap();
            got.push((path, entry.header().entry_type().is_dir(), content.len()));
        }
        assert_eq!(
            got,
            [
                ("README.md".to_owned(), false, 30),
                ("entities".to_owned(), true, 0),
                ("entities/alice.md".to_owned(), false, 17),
                ("timeline".to_owned(), true, 0),
                ("timeline/2026".to_owned(), true, 0),
                ("timeline/2026/12-04.md".to_owned(), false, 200_000),
            ]
        );
        let over = ask(&fs, VolumeRead::Export { max_bytes: 1000 }).unwrap_err();
        assert_eq!(over.kind, Why::TooLarge);
    }

    #[test]
    fn damaged_images_never_panic_the_reader() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = image_of(dir.path());
        let clean = std::fs::read(&image).unwrap();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut answered, mut refused) = (0, 0);
        for _ in 0..300 {
            let mut bytes = clean.clone();
            for _ in 0..64 {
                let at = (next() % (1 << 20)) as usize;
                bytes[at] = next() as u8;
            }
            let Ok(fs) = Ext4::load(Box::new(bytes)) else {
                refused += 1;
                continue;
            };
            for request in [
                VolumeRead::Tree {
                    path: String::new(),
                },
                file("entities/alice.md"),
                VolumeRead::Export { max_bytes: 1 << 20 },
            ] {
                match ask(&fs, request) {
                    Ok(_) => answered += 1,
                    Err(_) => refused += 1,
                }
            }
        }
        assert!(answered + refused >= 300, "{answered} {refused}");
    }
}
