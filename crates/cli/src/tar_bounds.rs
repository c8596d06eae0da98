//! A tar stream from a box, passed through with bounds. The box is not trusted (in a VM
//! its root controls berth-init), and the `tar` reader holds a GNU long-name or PAX record
//! whole in memory before the entry it describes: this reader follows the stream's headers
//! as the bytes go by and fails it at a record over [`MAX_RECORD_BYTES`], at a PAX `size`
//! (which would move the next header where this reader cannot follow) and at GNU sparse
//! entries (whose extra headers likewise), so a hostile tar costs at most a record's bound.

use std::io::{self, Read};

/// Largest extension record (a name is at most 4096 bytes; PAX records a few more).
pub const MAX_RECORD_BYTES: u64 = 64 * 1024;

const BLOCK: usize = 512;

pub struct BoundedTar<R> {
    inner: R,
    header: [u8; BLOCK],
    /// Bytes of the current header seen so far.
    filled: usize,
    /// Bytes of the current entry's data (and padding) still to pass.
    skip: u64,
    /// A PAX record being collected (at most [`MAX_RECORD_BYTES`]), and how much of it is
    /// still to come.
    pax: Option<(Vec<u8>, u64)>,
}

impl<R: Read> BoundedTar<R> {
    pub fn new(inner: R) -> Self {
        BoundedTar {
            inner,
            header: [0; BLOCK],
            filled: 0,
            skip: 0,
            pax: None,
        }
    }

    fn observe(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = bytes
                    .len()
                    .min(usize::try_from(self.skip).unwrap_or(usize::MAX));
                if let Some((record, left)) = &mut self.pax {
                    let take = n.min(usize::try_from(*left).unwrap_or(usize::MAX));
                    record.extend_from_slice(&bytes[..take]);
                    *left -= take as u64;
                    if *left == 0 {
                        let (record, _) = self.pax.take().unwrap_or_default();
                        check_pax(&record)?;
                    }
                }
                self.skip -= n as u64;
                bytes = &bytes[n..];
                continue;
            }
            let n = bytes.len().min(BLOCK - self.filled);
            self.header[self.filled..self.filled + n].copy_from_slice(&bytes[..n]);
            self.filled += n;
            bytes = &bytes[n..];
            if self.filled == BLOCK {
                self.filled = 0;
                self.header_done()?;
            }
        }
        Ok(())
    }

    fn header_done(&mut self) -> io::Result<()> {
        let h = &self.header;
        if h.iter().all(|&b| b == 0) {
            return Ok(());
        }
        let size = entry_size(&h[124..136])?;
        match h[156] {
            b'L' | b'K' | b'x' | b'g' if size > MAX_RECORD_BYTES => {
                return Err(refused("an extension record over 64 KiB"))
            }
            b'S' => return Err(refused("a sparse file")),
            b'x' if size > 0 => self.pax = Some((Vec::with_capacity(size as usize), size)),
            _ => {}
        }
        self.skip = size.next_multiple_of(BLOCK as u64);
        Ok(())
    }
}

impl<R: Read> Read for BoundedTar<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(out)?;
        self.observe(&out[..n])?;
        Ok(n)
    }
}

fn check_pax(record: &[u8]) -> io::Result<()> {
    for ext in tar::PaxExtensions::new(record) {
        let ext = ext.map_err(|_| refused("a PAX record that does not parse"))?;
        if matches!(
            ext.key_bytes(),
            b"size" | b"GNU.sparse.size" | b"GNU.sparse.map"
        ) {
            return Err(refused("a PAX size or sparse map"));
        }
    }
    Ok(())
}

/// The size field: octal, or GNU's base-256 (high bit set) for large files.
fn entry_size(field: &[u8]) -> io::Result<u64> {
    if field[0] & 0x80 != 0 {
        let mut size = 0u64;
        for &b in &field[4..] {
            size = size
                .checked_mul(256)
                .ok_or_else(|| refused("a size that does not fit"))?
                | u64::from(b);
        }
        return Ok(size);
    }
    let text = std::str::from_utf8(field).map_err(|_| refused("a size that is not a number"))?;
    let text = text.trim_matches(|c| c == '\0' || c == ' ');
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).map_err(|_| refused("a size that is not a number"))
}

fn refused(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the box sent a tar with {what}; refused"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long_name_record(len: usize) -> Vec<u8> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::GNULongName);
        header.set_size(len as u64);
        header.as_mut_bytes()[..13].copy_from_slice(b"././@LongLink");
        header.set_cksum();
        let mut out = header.as_bytes().to_vec();
        out.resize(BLOCK + len.next_multiple_of(BLOCK), b'a');
        out
    }

    /// Reads everything through a bounded reader in small pieces.
    fn drain(bytes: &[u8]) -> io::Result<Vec<u8>> {
        let mut reader = BoundedTar::new(bytes);
        let mut out = Vec::new();
        let mut buf = [0u8; 100];
        loop {
            match reader.read(&mut buf)? {
                0 => return Ok(out),
                n => out.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[test]
    fn an_honest_tar_passes_through_unchanged_and_unpacks() {
        let mut builder = tar::Builder::new(Vec::new());
        let long = format!("{}/{}/file", "d".repeat(150), "e".repeat(150));
        let mut header = tar::Header::new_gnu();
        header.set_size(3);
        header.set_mode(0o644);
        builder
            .append_data(&mut header, &long, &b"abc"[..])
            .unwrap();
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_size(0);
        builder
            .append_link(&mut header, "link", "x".repeat(200))
            .unwrap();
        let bytes = builder.into_inner().unwrap();
        assert_eq!(drain(&bytes).unwrap(), bytes);
        let dir = tempfile::tempdir().unwrap();
        tar::Archive::new(BoundedTar::new(&bytes[..]))
            .unpack(dir.path())
            .unwrap();
        assert_eq!(std::fs::read(dir.path().join(&long)).unwrap(), b"abc");
    }

    #[test]
    fn a_huge_extension_record_is_refused_at_its_header() {
        let err = drain(&long_name_record(10 * 1024 * 1024)).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(err.to_string().contains("64 KiB"), "{err}");
        assert!(drain(&long_name_record(1000)).is_ok());
    }

    #[test]
    fn a_pax_size_is_refused() {
        let record = b"16 size=1000000\n";
        let mut header = tar::Header::new_ustar();
        header.set_entry_type(tar::EntryType::XHeader);
        header.set_size(record.len() as u64);
        header.set_cksum();
        let mut bytes = header.as_bytes().to_vec();
        bytes.extend_from_slice(record);
        bytes.resize(2 * BLOCK, 0);
        let err = drain(&bytes).unwrap_err();
        assert!(err.to_string().contains("PAX size"), "{err}");
    }
}
