//! The secret store's key file: 32 OS-random bytes, mode 0600, kept outside the database
//! (and, ideally, outside its backups) so a stolen `berth.db` alone reveals nothing.

use std::fs;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use ring::aead::{LessSafeKey, UnboundKey, CHACHA20_POLY1305};
use ring::digest::{digest, SHA256};

use crate::secrets::error::SecretError;

/// The key's length in bytes (ChaCha20-Poly1305 takes 256 bits).
pub const KEY_BYTES: usize = 32;

/// The loaded key, ready to seal and open.
pub struct SecretKey {
    pub(crate) aead: LessSafeKey,
    /// Hex of the first 8 bytes of the key's SHA-256: names the key without revealing it.
    pub(crate) id: String,
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey").field("id", &self.id).finish()
    }
}

impl SecretKey {
    /// A key from raw bytes; `raw` is zeroed before returning.
    pub(crate) fn from_bytes(raw: &mut [u8; KEY_BYTES]) -> Result<SecretKey, SecretError> {
        let id = key_id(raw);
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, raw).map_err(|_| SecretError::Crypto {
            action: "load the key",
        });
        wipe(raw);
        Ok(SecretKey {
            aead: LessSafeKey::new(unbound?),
            id,
        })
    }

    pub fn id(&self) -> &str {
        &self.id
    }
}

/// Hex of the first 8 bytes of SHA-256(key).
pub fn key_id(raw: &[u8]) -> String {
    berth_basics::hex(&digest(&SHA256, raw).as_ref()[..8])
}

/// Reads the key at `path`; `Ok(None)` when there is no file there.
pub fn load(path: &Path) -> Result<Option<SecretKey>, SecretError> {
    let io = |action| {
        move |source| SecretError::KeyFile {
            action,
            path: path.to_owned(),
            source,
        }
    };
    let mut file = match fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("open")(e)),
    };
    let meta = file.metadata().map_err(io("inspect"))?;
    if !meta.is_file() {
        return Err(SecretError::KeyNotRegular {
            path: path.to_owned(),
        });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(SecretError::KeyMode {
            path: path.to_owned(),
            mode,
        });
    }
    if meta.len() != KEY_BYTES as u64 {
        return Err(SecretError::KeyLength {
            path: path.to_owned(),
            len: meta.len(),
        });
    }
    let mut raw = [0u8; KEY_BYTES];
    // One byte more than a key: a file that grew after the length check is still caught.
    let mut extra = [0u8; 1];
    let read = file
        .read_exact(&mut raw)
        .and_then(|()| file.read(&mut extra));
    match read {
        Ok(0) => {}
        Ok(_) => {
            wipe(&mut raw);
            return Err(SecretError::KeyLength {
                path: path.to_owned(),
                len: KEY_BYTES as u64 + 1,
            });
        }
        Err(e) => {
            wipe(&mut raw);
            return Err(io("read")(e));
        }
    }
    SecretKey::from_bytes(&mut raw).map(Some)
}

/// Makes a new key at `path` (O_CREAT|O_EXCL, mode 0600; the parent directory is made
/// 0700 when missing). Fails if a file is already there.
pub fn create(path: &Path) -> Result<SecretKey, SecretError> {
    let io = |action| {
        move |source| SecretError::KeyFile {
            action,
            path: path.to_owned(),
            source,
        }
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(io("create the directory of"))?;
    }
    let mut raw = [0u8; KEY_BYTES];
    getrandom::fill(&mut raw).map_err(SecretError::Random)?;
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| {
            // The umask cannot widen 0600, but an odd one could narrow it to unreadable.
            file.set_permissions(fs::Permissions::from_mode(0o600))?;
            file.write_all(&raw)?;
            file.sync_all()
        });
    if let Err(e) = written {
        wipe(&mut raw);
        return Err(io("create")(e));
    }
    tracing::info!(path = %path.display(), key_id = %key_id(&raw), "secret store key created");
    SecretKey::from_bytes(&mut raw)
}

/// Overwrites `bytes` with zeros in a way the optimiser keeps.
pub(crate) fn wipe(bytes: &mut [u8]) {
    for b in bytes.iter_mut() {
        // SAFETY: `b` is a valid, aligned, exclusive reference to a byte.
        unsafe { std::ptr::write_volatile(b, 0) };
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_is_0600_32_bytes_and_loads_back_with_the_same_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/dir/secrets.key");
        let made = create(&path).unwrap();
        let meta = fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), 32);
        let parent = fs::metadata(path.parent().unwrap()).unwrap();
        assert_eq!(parent.permissions().mode() & 0o777, 0o700);
        let loaded = load(&path).unwrap().unwrap();
        assert_eq!(loaded.id(), made.id());
        assert_eq!(made.id().len(), 16);
        assert_eq!(key_id(&fs::read(&path).unwrap()), made.id());
        // Never over an existing file.
        assert!(create(&path).is_err());
    }

    #[test]
    fn a_missing_key_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(&dir.path().join("nope")).unwrap().is_none());
    }

    #[test]
    fn a_key_readable_by_others_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        create(&path).unwrap();
        for mode in [0o644, 0o640, 0o602] {
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            let err = load(&path).unwrap_err();
            assert!(matches!(err, SecretError::KeyMode { .. }), "{err:?}");
            assert!(err.to_string().contains("chmod 600"), "{err}");
        }
    }

    #[test]
    fn a_key_of_the_wrong_length_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0, 31, 33, 64] {
            let path = dir.path().join(format!("k{len}"));
            fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .unwrap()
                .write_all(&vec![1u8; len])
                .unwrap();
            let err = load(&path).unwrap_err();
            assert!(
                matches!(err, SecretError::KeyLength { len: l, .. } if l == len as u64),
                "{err:?}"
            );
        }
    }

    #[test]
    fn a_directory_is_not_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        fs::DirBuilder::new().mode(0o700).create(&path).unwrap();
        let err = load(&path).unwrap_err();
        assert!(matches!(err, SecretError::KeyNotRegular { .. }), "{err:?}");
    }
}
