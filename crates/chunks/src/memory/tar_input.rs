//! What a snapshot is taken from: `/memory` as a tar stream (the running box's agent packs
//! one; the confined volume reader writes one from a sleeping box's image), read into
//! memory within [`super::MAX_SNAPSHOT_BYTES`] and [`super::MAX_SNAPSHOT_FILES`].

use std::io::Read;

use berth_protocol::memory::memory_path;
use bytes::Bytes;

use super::{MAX_SNAPSHOT_BYTES, MAX_SNAPSHOT_FILES};
use crate::ChunkError;

/// One entry of `/memory`, its path relative to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryInput {
    Dir(String),
    File { path: String, content: Bytes },
}

impl MemoryInput {
    pub fn path(&self) -> &str {
        match self {
            MemoryInput::Dir(path) | MemoryInput::File { path, .. } => path,
        }
    }
}

/// The directories and regular files of a tar of `/memory`'s contents. Symlinks and
/// special files are left out (a snapshot holds notes, and a restore never writes a link);
/// a path that is not a plain relative one (`..`, absolute, not UTF-8) is refused.
pub fn read_tar(reader: impl Read) -> Result<Vec<MemoryInput>, ChunkError> {
    let bad = |why: String| ChunkError::MemoryInput(why);
    let mut archive = tar::Archive::new(reader);
    let mut inputs = Vec::new();
    let mut bytes = 0u64;
    let entries = archive
        .entries()
        .map_err(|e| bad(format!("the tar is unreadable: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(format!("the tar is unreadable: {e}")))?;
        let raw = String::from_utf8(entry.path_bytes().into_owned())
            .map_err(|_| bad("a name in the tar is not UTF-8".into()))?;
        let path = memory_path(raw.strip_prefix("./").unwrap_or(&raw))
            .map_err(|why| bad(format!("the name {raw:?} {why}")))?;
        if path.is_empty() {
            continue; // the directory itself
        }
        if inputs.len() >= MAX_SNAPSHOT_FILES {
            return Err(bad(format!(
                "/memory holds more than {MAX_SNAPSHOT_FILES} entries"
            )));
        }
        match entry.header().entry_type() {
            tar::EntryType::Directory => inputs.push(MemoryInput::Dir(path)),
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.size();
                bytes += size;
                if bytes > MAX_SNAPSHOT_BYTES {
                    return Err(bad(format!(
                        "/memory holds more than {} MiB",
                        MAX_SNAPSHOT_BYTES >> 20
                    )));
                }
                let mut content = Vec::with_capacity(size as usize);
                entry
                    .read_to_end(&mut content)
                    .map_err(|e| bad(format!("{path} in the tar is unreadable: {e}")))?;
                inputs.push(MemoryInput::File {
                    path,
                    content: Bytes::from(content),
                });
            }
            _ => {}
        }
    }
    Ok(inputs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_of(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, content) in entries {
            let mut h = tar::Header::new_gnu();
            match content {
                Some(c) => {
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(c.len() as u64);
                    h.set_mode(0o644);
                    h.set_cksum();
                    b.append_data(&mut h, path, *c).unwrap();
                }
                None => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    h.set_mode(0o755);
                    h.set_cksum();
                    b.append_data(&mut h, path, std::io::empty()).unwrap();
                }
            }
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn files_and_directories_are_read_and_links_left_out() {
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_cksum();
        b.append_link(&mut h, "link", "/etc/passwd").unwrap();
        let mut bytes = tar_of(&[("entities", None), ("entities/a.md", Some(b"alice"))]);
        bytes.truncate(bytes.len() - 1024); // drop the end blocks to append the link's
        bytes.extend(b.into_inner().unwrap());
        let inputs = read_tar(&bytes[..]).unwrap();
        assert_eq!(
            inputs,
            [
                MemoryInput::Dir("entities".into()),
                MemoryInput::File {
                    path: "entities/a.md".into(),
                    content: Bytes::from_static(b"alice")
                }
            ]
        );
    }

    #[test]
    fn a_path_out_of_memory_is_refused() {
        // tar's builder refuses `..` itself: write the name into the header by hand.
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_size(1);
        h.as_old_mut().name[..8].copy_from_slice(b"../evil\0");
        h.set_cksum();
        let mut bytes = h.as_bytes().to_vec();
        bytes.extend([b'x'; 512]);
        bytes.extend([0u8; 1024]);
        let err = read_tar(&bytes[..]).unwrap_err().to_string();
        assert!(err.contains(".."), "{err}");
    }
}
