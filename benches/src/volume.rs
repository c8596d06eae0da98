//! A synthetic volume image for the benchmarks that move whole volumes (durable copies,
//! backups): 1 GiB, sparse, of log-like text, random bytes, written zeros and holes, the
//! same on every run; and a check that a copy of it came back byte for byte.

use std::fs::File;
use std::io::{BufReader, Read as _};
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use crate::daemon::BenchResult;

const MIB: u64 = 1 << 20;
/// The image's length.
pub const IMAGE_BYTES: u64 = 1024 * MIB;

/// Where the first random extent starts and how long it is (the 1 MiB change goes there).
pub const EXTENT_SPACING: u64 = 16 * MIB;
pub const EXTENT_SHIFT: u64 = 3 * MIB / 2;

/// Writes the image: an extent of 2 to 8 MiB every 16 MiB (shifted 1.5 MiB, so most
/// straddle a chunk boundary), text and random alternating, every tenth one zeros, until
/// there are 150 MiB of each and 16 MiB of zeros. The MiB of text, random and zeros in it.
pub fn make_image(path: &Path) -> std::io::Result<(u64, u64, u64)> {
    let file = File::create(path)?;
    file.set_len(IMAGE_BYTES)?;
    let (mut text_bytes, mut random_bytes, mut zero_bytes) = (0, 0, 0);
    for n in 0..IMAGE_BYTES / EXTENT_SPACING {
        let at = n * EXTENT_SPACING + EXTENT_SHIFT;
        let len = (2 + n % 7) * MIB;
        let bytes = if n % 10 == 9 && zero_bytes < 16 * MIB {
            zero_bytes += len;
            vec![0; len as usize]
        } else if (n % 2 == 0 || random_bytes >= 150 * MIB) && text_bytes < 150 * MIB {
            text_bytes += len;
            text(n, len)
        } else if random_bytes < 150 * MIB {
            random_bytes += len;
            noise(n, len)
        } else {
            break;
        };
        file.write_all_at(&bytes, at)?;
    }
    file.sync_all()?;
    Ok((text_bytes / MIB, random_bytes / MIB, zero_bytes / MIB))
}

/// Log-like lines: compressible, though not trivially.
pub fn text(seed: u64, len: u64) -> Vec<u8> {
    let words = [
        "agent",
        "wrote",
        "file",
        "ok",
        "GET",
        "/v1/boxes",
        "200",
        "exec",
        "pid",
    ];
    let mut out = Vec::with_capacity(len as usize + 128);
    let mut line = seed * 1_000_000;
    while (out.len() as u64) < len {
        line += 1;
        let word = words[(line % words.len() as u64) as usize];
        let entry = format!(
            "2026-05-0{} 12:{:02}:{:02} {word} request {line} took {} ms\n",
            1 + line % 9,
            line % 60,
            line * 7 % 60,
            line % 997
        );
        out.extend_from_slice(entry.as_bytes());
    }
    out.truncate(len as usize);
    out
}

/// Random bytes (xorshift): incompressible.
pub fn noise(seed: u64, len: u64) -> Vec<u8> {
    berth_testkit::pattern::bytes(len as usize, seed)
}

/// Fails the bench when a restore is not the image.
pub fn check_same(a: &Path, b: &Path) -> BenchResult<()> {
    let (mut fa, mut fb) = (
        BufReader::new(File::open(a)?),
        BufReader::new(File::open(b)?),
    );
    let (mut ba, mut bb) = (vec![0u8; MIB as usize], vec![0u8; MIB as usize]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return if fb.read(&mut bb)? == 0 {
                Ok(())
            } else {
                Err(format!("{} is longer than {}", b.display(), a.display()).into())
            };
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Err(format!("{} differs from {}", b.display(), a.display()).into());
        }
    }
}
