//! A reader that hashes what passes through it: each entry of an archive, on its way out
//! and on its way in, for the manifest.

use std::io::{self, Read};

use sha2::{Digest, Sha256};

pub struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    read: u64,
}

impl<R: Read> Hashing<R> {
    pub fn new(inner: R) -> Hashing<R> {
        Hashing {
            inner,
            hasher: Sha256::new(),
            read: 0,
        }
    }

    /// The bytes read so far.
    pub fn read_bytes(&self) -> u64 {
        self.read
    }

    /// The sha256 of what was read, lowercase hex.
    pub fn sha256(self) -> String {
        self.hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}
