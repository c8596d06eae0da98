//! Content keys: a hash of every input of a build, naming what it built. Same inputs, same
//! key, so a second build finds the first one's result; any change, a new key.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::io;
use crate::ImageError;

/// The builder's own format version: part of every key, so a change in how images are
/// laid out rebuilds them. Bump it with any such change.
pub const BUILDER_VERSION: u32 = 1;

/// Hex of the first 16 bytes of a SHA-256 over a build's inputs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ContentKey(String);

impl ContentKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for ContentKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Collects a build's inputs. Every field is length-prefixed and named, so no two input
/// lists hash alike by running together.
#[derive(Debug, Clone)]
pub struct KeyBuilder(Sha256);

impl KeyBuilder {
    /// A key for a build of `kind` ("kernel", "initramfs", "rootfs", ...).
    pub fn new(kind: &str) -> Self {
        let mut k = KeyBuilder(Sha256::new());
        k.put(b"berth-image");
        k.put(&BUILDER_VERSION.to_le_bytes());
        k.put(kind.as_bytes());
        k
    }

    /// Adds a named input.
    pub fn field(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.put(name.as_bytes());
        self.put(value.as_ref());
        self
    }

    /// Adds a file's bytes.
    pub fn file(mut self, name: &str, path: &Path) -> Result<Self, ImageError> {
        let digest = file_sha256(path)?;
        self.put(name.as_bytes());
        self.put(&digest);
        Ok(self)
    }

    /// Adds a directory tree: every entry's relative path, type, mode, owner and content
    /// (file bytes, link target). Timestamps are left out: they change nothing in the image
    /// a box sees.
    pub fn tree(mut self, name: &str, dir: &Path) -> Result<Self, ImageError> {
        self.put(name.as_bytes());
        let mut entries = Vec::new();
        crate::tree::walk(dir, &mut entries)?;
        for (rel, meta) in entries {
            let path = dir.join(&rel);
            self.put(rel.as_os_str().as_encoded_bytes());
            self.put(&meta.mode().to_le_bytes());
            self.put(&meta.uid().to_le_bytes());
            self.put(&meta.gid().to_le_bytes());
            let ft = meta.file_type();
            if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(io("read the link", &path))?;
                self.put(target.as_os_str().as_encoded_bytes());
            } else if ft.is_file() {
                self.put(&file_sha256(&path)?);
            } else {
                self.put(&meta.rdev().to_le_bytes());
            }
        }
        Ok(self)
    }

    pub fn finish(self) -> ContentKey {
        let digest = self.0.finalize();
        ContentKey(berth_basics::hex(&digest[..16]))
    }

    fn put(&mut self, bytes: &[u8]) {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
    }
}

/// SHA-256 of a file's bytes.
pub fn file_sha256(path: &Path) -> Result<[u8; 32], ImageError> {
    let mut file = std::fs::File::open(path).map_err(io("open", path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf).map_err(io("read", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_inputs_same_key_any_change_a_new_one() {
        let a = KeyBuilder::new("k")
            .field("x", "1")
            .field("y", "2")
            .finish();
        let b = KeyBuilder::new("k")
            .field("x", "1")
            .field("y", "2")
            .finish();
        assert_eq!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        let changed = [
            KeyBuilder::new("other")
                .field("x", "1")
                .field("y", "2")
                .finish(),
            KeyBuilder::new("k")
                .field("x", "1")
                .field("y", "3")
                .finish(),
            KeyBuilder::new("k")
                .field("x", "12")
                .field("y", "")
                .finish(),
            KeyBuilder::new("k").field("x", "1").finish(),
        ];
        for c in changed {
            assert_ne!(a, c);
        }
    }

    #[test]
    fn a_tree_key_follows_content_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir(d.join("sub")).unwrap();
        std::fs::write(d.join("sub/f"), "hello").unwrap();
        std::os::unix::fs::symlink("sub/f", d.join("link")).unwrap();
        let key = || KeyBuilder::new("t").tree("dir", d).unwrap().finish();
        let k0 = key();
        assert_eq!(k0, key());
        std::fs::write(d.join("sub/f"), "hellO").unwrap();
        let k1 = key();
        assert_ne!(k0, k1);
        std::fs::set_permissions(d.join("sub/f"), std::fs::Permissions::from_mode(0o600)).unwrap();
        let k2 = key();
        assert_ne!(k1, k2);
        std::fs::remove_file(d.join("link")).unwrap();
        std::os::unix::fs::symlink("sub", d.join("link")).unwrap();
        assert_ne!(k2, key());
    }

    #[test]
    fn file_keys_follow_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, "a").unwrap();
        let k = || KeyBuilder::new("f").file("f", &f).unwrap().finish();
        let a = k();
        assert_eq!(a, k());
        std::fs::write(&f, "b").unwrap();
        assert_ne!(a, k());
    }
}
