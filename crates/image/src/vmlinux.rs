//! An uncompressed ELF `vmlinux` from a bzImage, for Firecracker (which boots only ELF
//! kernels on x86_64; QEMU boots the bzImage itself).
//!
//! A bzImage's setup header says where its compressed payload is (`payload_offset` and
//! `payload_length`, boot protocol 2.08+), and the kernel build appends the uncompressed
//! size to the payload. Debian's kernels compress with LZ4 (the legacy frame); gzip is read
//! too. Other compressions: give Firecracker a `vmlinux` (`berth image build --kernel`).

use std::io::Read;
use std::path::PathBuf;

use crate::error::io;
use crate::{ImageError, Kernel};

/// The extracted kernel's file name in the kernel's store dir.
pub const VMLINUX_NAME: &str = "vmlinux";
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// "HdrS" at 0x202: a bzImage with a setup header.
const HDRS_MAGIC: &[u8; 4] = b"HdrS";
const LZ4_LEGACY_MAGIC: u32 = 0x184C_2102;
/// The legacy LZ4 frame's fixed block size (uncompressed).
const LZ4_LEGACY_BLOCK: usize = 8 << 20;
const GZIP_MAGIC: &[u8; 2] = b"\x1f\x8b";
/// No kernel is bigger than this uncompressed; a bigger claim is a corrupt image.
const MAX_VMLINUX: usize = 1 << 30;

/// The ELF kernel of `kernel`: the kernel itself when it is one (a user's vmlinux), else
/// `<kernel dir>/vmlinux`, extracted once.
pub fn vmlinux(kernel: &Kernel) -> Result<PathBuf, ImageError> {
    let image = std::fs::read(&kernel.vmlinuz).map_err(io("read", &kernel.vmlinuz))?;
    if image.starts_with(ELF_MAGIC) {
        return Ok(kernel.vmlinuz.clone());
    }
    let out = kernel.dir.join(VMLINUX_NAME);
    if out.exists() {
        return Ok(out);
    }
    let elf = extract(&image).map_err(|why| ImageError::Invalid {
        what: "kernel for Firecracker",
        value: kernel.vmlinuz.display().to_string(),
        why,
    })?;
    berth_basics::write_atomically(&out, &elf, 0o644).map_err(io("write", &out))?;
    Ok(out)
}

/// The uncompressed ELF inside a bzImage.
fn extract(image: &[u8]) -> Result<Vec<u8>, &'static str> {
    if image.get(0x202..0x206) != Some(HDRS_MAGIC) {
        return Err("not a bzImage (no setup header) nor an ELF vmlinux");
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(image.get(at..at + 4)?.try_into().ok()?))
    };
    // setup_sects 0 means 4 (boot protocol), plus the boot sector itself.
    let setup_sects = match image[0x1f1] {
        0 => 4,
        n => usize::from(n),
    };
    let start = (setup_sects + 1) * 512;
    let (offset, length) = (
        u32_at(0x248).ok_or("truncated setup header")? as usize,
        u32_at(0x24c).ok_or("truncated setup header")? as usize,
    );
    let payload = image
        .get(start + offset..start + offset + length)
        .ok_or("the payload is outside the file")?;
    if payload.len() < 8 {
        return Err("the payload is empty");
    }
    let (stream, size) = payload.split_at(payload.len() - 4);
    let size = u32::from_le_bytes(size.try_into().expect("4 bytes")) as usize;
    if size > MAX_VMLINUX {
        return Err("the payload claims an impossible size");
    }
    let elf = if stream.starts_with(&LZ4_LEGACY_MAGIC.to_le_bytes()) {
        lz4_legacy(&stream[4..], size)?
    } else if stream.starts_with(GZIP_MAGIC) {
        let mut out = Vec::with_capacity(size);
        flate2::read::GzDecoder::new(stream)
            .take(MAX_VMLINUX as u64)
            .read_to_end(&mut out)
            .map_err(|_| "the gzip payload does not decompress")?;
        out
    } else {
        return Err(
            "the payload is compressed with neither LZ4 nor gzip: give a vmlinux with --kernel",
        );
    };
    if elf.len() != size {
        return Err("the payload decompresses to another size than the kernel build recorded");
    }
    if !elf.starts_with(ELF_MAGIC) {
        return Err("the payload is not an ELF kernel");
    }
    Ok(elf)
}

/// LZ4's legacy frame (after its magic): blocks of a little-endian compressed length and
/// the block, each at most 8 MiB uncompressed, until `size` bytes are out.
fn lz4_legacy(mut stream: &[u8], size: usize) -> Result<Vec<u8>, &'static str> {
    let mut out = vec![0u8; size];
    let mut filled = 0;
    while filled < size {
        let (len, rest) = stream
            .split_first_chunk::<4>()
            .ok_or("the LZ4 payload ends early")?;
        let len = u32::from_le_bytes(*len) as usize;
        let block = rest
            .get(..len)
            .ok_or("an LZ4 block runs past the payload")?;
        let room = (size - filled).min(LZ4_LEGACY_BLOCK);
        let n = lz4_flex::block::decompress_into(block, &mut out[filled..filled + room])
            .map_err(|_| "an LZ4 block does not decompress")?;
        if n == 0 {
            return Err("an empty LZ4 block");
        }
        filled += n;
        stream = &rest[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake bzImage: a setup header pointing at `payload` (+ the size trailer).
    fn bz_image(payload: &[u8], size: u32) -> Vec<u8> {
        let setup_sects = 3u8;
        let start = (usize::from(setup_sects) + 1) * 512;
        let mut image = vec![0u8; start + 100];
        image[0x1f1] = setup_sects;
        image[0x202..0x206].copy_from_slice(HDRS_MAGIC);
        let mut body = payload.to_vec();
        body.extend_from_slice(&size.to_le_bytes());
        image[0x248..0x24c].copy_from_slice(&100u32.to_le_bytes());
        image[0x24c..0x250].copy_from_slice(&(body.len() as u32).to_le_bytes());
        image.extend_from_slice(&body);
        image
    }

    fn fake_elf(len: usize) -> Vec<u8> {
        let mut elf = ELF_MAGIC.to_vec();
        elf.extend((0..len - 4).map(|i| (i % 251) as u8));
        elf
    }

    #[test]
    fn extracts_lz4_legacy_across_blocks_and_gzip() {
        // Two 8 MiB blocks and a short one, as the kernel's lz4 -l writes them.
        let elf = fake_elf(2 * LZ4_LEGACY_BLOCK + 12345);
        let mut lz4 = LZ4_LEGACY_MAGIC.to_le_bytes().to_vec();
        for chunk in elf.chunks(LZ4_LEGACY_BLOCK) {
            let block = lz4_flex::block::compress(chunk);
            lz4.extend_from_slice(&(block.len() as u32).to_le_bytes());
            lz4.extend_from_slice(&block);
        }
        assert_eq!(extract(&bz_image(&lz4, elf.len() as u32)).unwrap(), elf);

        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &elf[..100_000]).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(extract(&bz_image(&gz, 100_000)).unwrap(), elf[..100_000]);
    }

    #[test]
    fn refuses_what_it_cannot_read_without_panicking() {
        let elf = fake_elf(4096);
        let mut lz4 = LZ4_LEGACY_MAGIC.to_le_bytes().to_vec();
        let block = lz4_flex::block::compress(&elf);
        lz4.extend_from_slice(&(block.len() as u32).to_le_bytes());
        lz4.extend_from_slice(&block);
        for (image, why) in [
            (vec![0u8; 100], "not a bzImage"),
            (
                bz_image(b"\x28\xb5\x2f\xfdzstd....", 4096),
                "neither LZ4 nor gzip",
            ),
            (bz_image(&lz4, 5000), "LZ4 payload ends early"),
            (bz_image(&lz4[..lz4.len() - 10], 4096), "runs past"),
            (bz_image(&lz4, u32::MAX), "impossible size"),
        ] {
            assert!(extract(&image).unwrap_err().contains(why), "{why}");
        }
        // Every truncation of a good image is an error, never a panic.
        let good = bz_image(&lz4, 4096);
        for cut in (0..good.len()).step_by(97) {
            let _ = extract(&good[..cut]);
        }
    }

    #[test]
    fn the_debian_cloud_kernel_in_the_test_cache_yields_its_elf() {
        let cache = berth_testkit::image_cache::dir().join("images/kernel");
        let Some(vmlinuz) = std::fs::read_dir(&cache)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("vmlinuz"))
            .find(|p| p.is_file())
        else {
            berth_testkit::skip(
                "vm-images",
                format!("no kernel in {} (the VM tests build it)", cache.display()),
            );
            return;
        };
        let elf = extract(&std::fs::read(&vmlinuz).unwrap()).unwrap();
        assert!(elf.len() > 8 << 20, "{} bytes", elf.len());
        // 64-bit, little-endian, x86-64 executable.
        assert_eq!((elf[4], elf[5]), (2, 1));
        assert_eq!(u16::from_le_bytes([elf[18], elf[19]]), 62);
    }
}
