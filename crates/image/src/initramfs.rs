//! The initramfs: an uncompressed newc cpio holding the static berth-init as `/berth-init`
//! (booted with `rdinit=/berth-init`), the kernel's chosen modules under
//! `/lib/modules/<version>/`, the empty mount points PID 1 needs, and `/dev/console`.

use std::io::{BufWriter, Read};
use std::path::{Path, PathBuf};

use crate::cpio::CpioWriter;
use crate::error::io;
use crate::key::KeyBuilder;
use crate::store::install;
use crate::{ContentKey, ImageError, ImageStore, Kernel, Progress};

/// Where berth-init is in the archive (the kernel command line's `rdinit=`).
pub const INIT_PATH: &str = "/berth-init";

/// Empty directories in the archive, with their modes.
const DIRS: &[(&str, u32)] = &[
    ("proc", 0o555),
    ("sys", 0o555),
    ("dev", 0o755),
    ("newroot", 0o755),
    ("run", 0o755),
    ("tmp", 0o1777),
    ("lib", 0o755),
    ("lib/modules", 0o755),
];

/// An initramfs in the image store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initramfs {
    pub key: ContentKey,
    /// `<images>/initramfs/<key>.cpio`.
    pub path: PathBuf,
}

/// Builds (or finds) the initramfs for `kernel` with the static binary `init_binary`.
pub fn build_initramfs(
    store: &ImageStore,
    kernel: &Kernel,
    init_binary: &Path,
    progress: &dyn Progress,
) -> Result<Initramfs, ImageError> {
    check_static_elf(init_binary)?;
    let key = KeyBuilder::new("initramfs")
        .field("kernel", kernel.key.as_str())
        .file("init", init_binary)?
        .finish();
    let path = store.initramfs_path(&key);
    if path.is_file() {
        return Ok(Initramfs { key, path });
    }
    progress.stage("write the initramfs");
    let scratch = store.scratch("initramfs")?;
    let out = scratch.path().join("initramfs.cpio");
    let file = std::fs::File::create(&out).map_err(io("create", &out))?;
    let mut w = CpioWriter::new(BufWriter::new(file));
    let wio = |e| ImageError::Io {
        action: "write the initramfs",
        path: out.clone(),
        source: e,
    };
    for (dir, mode) in DIRS {
        w.dir(dir, *mode).map_err(wio)?;
    }
    w.char_device("dev/console", 0o600, 5, 1).map_err(wio)?;
    let init = std::fs::File::open(init_binary).map_err(io("open", init_binary))?;
    let len = init.metadata().map_err(io("stat", init_binary))?.len();
    w.file_from(INIT_PATH, 0o755, len, init).map_err(wio)?;
    if let Some(modules) = &kernel.modules {
        let base = format!("lib/modules/{}", modules.version);
        w.dir(&base, 0o755).map_err(wio)?;
        let mut entries = Vec::new();
        crate::tree::walk(&modules.dir, &mut entries)?;
        for (rel, meta) in entries {
            let name = format!("{base}/{}", rel.display());
            if meta.is_dir() {
                w.dir(&name, 0o755).map_err(wio)?;
            } else if meta.is_file() {
                let src = modules.dir.join(&rel);
                let f = std::fs::File::open(&src).map_err(io("open", &src))?;
                w.file_from(&name, 0o644, meta.len(), f).map_err(wio)?;
            }
            progress.bytes(w.written(), None);
        }
    }
    let buf = w.finish().map_err(wio)?;
    buf.into_inner()
        .map_err(|e| wio(e.into_error()))?
        .sync_all()
        .map_err(wio)?;
    install(&out, &path)?;
    Ok(Initramfs { key, path })
}

/// PID 1 in an initramfs has no libraries to load: the binary must be a static ELF (no
/// `PT_INTERP` program header).
fn check_static_elf(path: &Path) -> Result<(), ImageError> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io("open", path))?
        .take(64 * 1024)
        .read_to_end(&mut bytes)
        .map_err(io("read", path))?;
    let invalid = |why| ImageError::Invalid {
        what: "berth-init binary",
        value: path.display().to_string(),
        why,
    };
    if bytes.len() < 64 || bytes[..4] != *b"\x7fELF" || bytes[4] != 2 {
        return Err(invalid("not a 64-bit ELF executable"));
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(bytes[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let Some(p_type) = bytes.get(at..at + 4) else {
            return Err(invalid("program headers past the first 64 KiB"));
        };
        if p_type == 3u32.to_le_bytes() {
            return Err(invalid(
                "dynamically linked: build the static berth-init (see docs/images.md)",
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpio::parse;
    use crate::NoProgress;

    /// A stand-in for berth-init: an ELF header with no program headers (so no PT_INTERP).
    fn fake_static_elf(dir: &Path) -> PathBuf {
        let path = dir.join("init");
        let mut elf = vec![0u8; 64];
        elf[..5].copy_from_slice(b"\x7fELF\x02");
        elf.extend_from_slice(b"payload");
        std::fs::write(&path, elf).unwrap();
        path
    }

    #[test]
    fn dynamic_binaries_are_refused() {
        let err = check_static_elf(Path::new("/bin/sh")).unwrap_err();
        assert!(err.to_string().contains("dynamically linked"), "{err}");
        assert!(check_static_elf(Path::new("/etc/hostname")).is_err());
    }

    #[test]
    fn initramfs_holds_init_dirs_and_modules_and_is_built_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = ImageStore::new(dir.path());
        let init = fake_static_elf(dir.path());
        // A kernel with one fake module.
        let mdir = dir.path().join("k/lib/modules/9.9.9");
        std::fs::create_dir_all(mdir.join("kernel/drivers")).unwrap();
        std::fs::write(mdir.join("kernel/drivers/a.ko"), "ko").unwrap();
        std::fs::write(mdir.join("modules.dep"), "kernel/drivers/a.ko:\n").unwrap();
        let kernel = Kernel {
            key: KeyBuilder::new("test").finish(),
            dir: dir.path().join("k"),
            vmlinuz: dir.path().join("k/vmlinuz"),
            modules: Some(crate::KernelModules {
                version: "9.9.9".into(),
                dir: mdir,
                load_order: vec!["kernel/drivers/a.ko".into()],
            }),
        };
        let built = build_initramfs(&store, &kernel, &init, &NoProgress).unwrap();
        let entries = parse::entries(&std::fs::read(&built.path).unwrap());
        let find = |n: &str| {
            entries
                .iter()
                .find(|e| e.name == n)
                .unwrap_or_else(|| panic!("{n}"))
        };
        assert_eq!(find("berth-init").mode, 0o100755);
        assert_eq!(find("berth-init").data, std::fs::read(&init).unwrap());
        assert_eq!(find("tmp").mode, 0o41777);
        for d in ["proc", "sys", "dev", "newroot", "run"] {
            assert_eq!(find(d).mode & 0o170000, 0o040000, "{d}");
        }
        assert_eq!(find("dev/console").rdev, (5, 1));
        assert_eq!(find("lib/modules/9.9.9/kernel/drivers/a.ko").data, b"ko");
        assert_eq!(
            find("lib/modules/9.9.9/modules.dep").data,
            b"kernel/drivers/a.ko:\n"
        );
        // Every entry's parent comes before it.
        for (i, e) in entries.iter().enumerate() {
            if let Some((parent, _)) = e.name.rsplit_once('/') {
                assert!(entries[..i].iter().any(|p| p.name == parent), "{}", e.name);
            }
        }
        let mtime = std::fs::metadata(&built.path).unwrap().modified().unwrap();
        let again = build_initramfs(&store, &kernel, &init, &NoProgress).unwrap();
        assert_eq!(again, built);
        assert_eq!(
            std::fs::metadata(&built.path).unwrap().modified().unwrap(),
            mtime
        );
        // A new init is a new archive.
        std::fs::write(&init, [&std::fs::read(&init).unwrap()[..], b"2"].concat()).unwrap();
        let changed = build_initramfs(&store, &kernel, &init, &NoProgress).unwrap();
        assert_ne!(changed.key, built.key);
    }
}
