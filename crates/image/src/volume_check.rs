//! Checking a box volume image before the host mounts, grows or reads it. Every e2fsck
//! here runs confined (`confine.rs`).
//!
//! Two levels:
//! - [`check_volume`]: the routine check of an image only the host kernel has written
//!   (the sandbox's own mounts): `e2fsck -p`, skipped when the superblock records a clean
//!   unmount (which the host kernel wrote, so it can be believed).
//! - [`check_guest_written_volume`]: an image a VM's guest may have written byte by byte:
//!   the journal replayed (when it holds transactions) with an undo file, then a full
//!   read-only check (`e2fsck -fn`, the image bound read-only). Any failure undoes the
//!   replay, so a refused image is left byte for byte as it was.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::confine::{self, Bind, Limits, ToolOutput};
use crate::error::io;
use crate::tool::{E2FSCK, E2UNDO};
use crate::ImageError;

/// The name an image has inside a confined tool's root.
pub(crate) const IMAGE_INSIDE: &str = "volume.ext4";
const UNDO_INSIDE: &str = "replay.undo";

/// What [`check_volume`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsckOutcome {
    Clean,
    /// `e2fsck -p` replayed the journal or fixed something (after an unclean stop);
    /// `report` is what it printed.
    Repaired {
        report: String,
    },
}

/// Checks the volume at `path` with `e2fsck -p` (preen: repairs only what is safe without
/// a person) unless its superblock records a clean unmount with no error and no journal to
/// replay, which is all `e2fsck -p` would look at then (and a process less per start).
/// Trusts that superblock: call [`check_guest_written_volume`] first on an image a guest
/// may have written. A file system it cannot repair is [`ImageError::ToolFailed`] with
/// e2fsck's output. The box must be stopped.
pub fn check_volume(path: &Path) -> Result<FsckOutcome, ImageError> {
    if crate::volume_usage::cleanly_unmounted(path)? {
        return Ok(FsckOutcome::Clean);
    }
    let out = run_e2fsck(path, &["-p"], true)?;
    let report = out.report();
    // 0: no errors, though it may have replayed the journal (after a crash: it says so
    // before its `clean` summary); 1: errors corrected; 2: corrected, and a mounted root
    // would want a reboot (not ours). 4 and up: left uncorrected, or e2fsck failed.
    let only_summary = report.split(" | ").all(|l| l.contains(": clean,"));
    match out.status.code() {
        Some(0) if only_summary => Ok(FsckOutcome::Clean),
        Some(0..=2) => Ok(FsckOutcome::Repaired { report }),
        _ => Err(ImageError::ToolFailed {
            command: format!("e2fsck -p {}", path.display()),
            status: out.status,
            stderr: report,
        }),
    }
}

/// The full check of an image a guest may have written: see the module doc. `Ok` means
/// e2fsck found nothing wrong in the whole file system (after replaying its journal, which
/// it keeps); [`ImageError::VolumeRefused`] says which step failed and what e2fsck
/// printed, and the image is as it was.
pub fn check_guest_written_volume(image: &Path) -> Result<(), ImageError> {
    let undo = undo_path(image);
    let replayed = if crate::volume_usage::needs_recovery(image)? {
        replay_journal(image, &undo)?;
        true
    } else {
        false
    };
    let verdict = full_check(image);
    if verdict.is_err() && replayed {
        undo_replay(image, &undo)?;
    }
    let _ = std::fs::remove_file(&undo);
    verdict
}

/// `e2fsck -fn`: reads everything, changes nothing (the image is bound read-only too).
fn full_check(image: &Path) -> Result<(), ImageError> {
    let out = run_e2fsck(image, &["-f", "-n"], false).map_err(|e| refused(image, FULL, e))?;
    if out.status.code() == Some(0) {
        return Ok(());
    }
    Err(ImageError::VolumeRefused {
        image: image.into(),
        check: FULL,
        report: format!("{}: {}", out.status, out.report()),
    })
}

const FULL: &str = "full check (e2fsck -fn)";
const REPLAY: &str = "journal replay (e2fsck -E journal_only)";

/// Replays the journal's transactions into the file system, keeping what they overwrite
/// in `undo`; a failure is undone before it is reported.
fn replay_journal(image: &Path, undo: &PathBuf) -> Result<(), ImageError> {
    let _ = std::fs::remove_file(undo);
    std::fs::File::create(undo).map_err(io("create", undo))?;
    let args: [&OsStr; 6] = [
        "-p".as_ref(),
        "-E".as_ref(),
        "journal_only".as_ref(),
        "-z".as_ref(),
        &confine::inside(UNDO_INSIDE),
        &confine::inside(IMAGE_INSIDE),
    ];
    let binds = [
        Bind::writable(image, IMAGE_INSIDE),
        Bind::writable(undo, UNDO_INSIDE),
    ];
    let report = match confine::run(E2FSCK, &args, &binds, limits_for(image)?) {
        Ok(out) if out.status.code() == Some(0) => return Ok(()),
        Ok(out) => format!("{}: {}", out.status, out.report()),
        Err(e @ ImageError::TookTooLong { .. }) => e.to_string(),
        Err(e) => {
            undo_replay(image, undo)?;
            return Err(e);
        }
    };
    // An e2fsck that stopped before writing leaves an undo file without its header.
    let report = match undo_replay(image, undo) {
        Ok(()) => report,
        Err(e) => format!("{report}; undoing what it wrote: {e}"),
    };
    let _ = std::fs::remove_file(undo);
    Err(ImageError::VolumeRefused {
        image: image.into(),
        check: REPLAY,
        report,
    })
}

/// Puts back what the replay overwrote (`e2undo`, confined). Does nothing when the replay
/// wrote nothing (an empty undo file).
fn undo_replay(image: &Path, undo: &Path) -> Result<(), ImageError> {
    if std::fs::metadata(undo).map_or(true, |m| m.len() == 0) {
        return Ok(());
    }
    let args: [&OsStr; 2] = [
        &confine::inside(UNDO_INSIDE),
        &confine::inside(IMAGE_INSIDE),
    ];
    let binds = [
        Bind::writable(image, IMAGE_INSIDE),
        Bind::read_only(undo, UNDO_INSIDE),
    ];
    let out = confine::run(E2UNDO, &args, &binds, limits_for(image)?)?;
    if out.status.success() {
        return Ok(());
    }
    Err(ImageError::ToolFailed {
        command: format!("e2undo {} {}", undo.display(), image.display()),
        status: out.status,
        stderr: out.report(),
    })
}

/// A step that did not run to its verdict (killed at its deadline, could not start),
/// as a refusal naming the step.
fn refused(image: &Path, check: &'static str, e: ImageError) -> ImageError {
    match e {
        ImageError::TookTooLong { .. } => ImageError::VolumeRefused {
            image: image.into(),
            check,
            report: e.to_string(),
        },
        other => other,
    }
}

/// e2fsck with `args` on `image`, confined; `writable` binds the image read-write.
pub(crate) fn run_e2fsck(
    image: &Path,
    args: &[&str],
    writable: bool,
) -> Result<ToolOutput, ImageError> {
    let target = confine::inside(IMAGE_INSIDE);
    let mut all: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    all.push(&target);
    let bind = if writable {
        Bind::writable(image, IMAGE_INSIDE)
    } else {
        Bind::read_only(image, IMAGE_INSIDE)
    };
    confine::run(E2FSCK, &all, &[bind], limits_for(image)?)
}

pub(crate) fn limits_for(image: &Path) -> Result<Limits, ImageError> {
    let len = std::fs::metadata(image).map_err(io("stat", image))?.len();
    Ok(Limits::for_image(len))
}

/// `<image>.undo`, beside the image in the host-only box dir.
fn undo_path(image: &Path) -> PathBuf {
    let mut name = image.file_name().unwrap_or_default().to_os_string();
    name.push(".undo");
    image.with_file_name(name)
}

#[cfg(test)]
mod tests {
    //! Images crafted the way a VM's guest root could write them (debugfs and byte
    //! writes on a fresh volume), each refused by the full check with the image unchanged.

    use std::io::{Read, Seek, SeekFrom, Write};
    use std::process::Command;

    use super::*;

    const SB: u64 = 1024;

    fn skip() -> bool {
        let skip = crate::tool::MKFS_EXT4.locate().is_err() || E2UNDO.locate().is_err();
        if skip {
            berth_testkit::skip("e2fsprogs", "mkfs.ext4, e2fsck, e2undo, debugfs");
        }
        skip
    }

    fn fresh(dir: &Path) -> PathBuf {
        let image = dir.join("volume.ext4");
        crate::create_volume(&image, 64).unwrap();
        crate::ext4::debugfs_write(
            &image,
            "mkdir /home/a\nmkdir /home/a/b\nwrite /etc/hostname /home/a/f\n",
        )
        .unwrap();
        image
    }

    /// sha256sum's line for `image` (the debug build's own sha2 takes seconds on 64 MiB).
    fn hash(image: &Path) -> String {
        let out = Command::new("sha256sum").arg(image).output().unwrap();
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What `debugfs -R` prints for `request` on `image` (read-only).
    fn debugfs(image: &Path, request: &str) -> String {
        let out = Command::new("debugfs")
            .arg("-R")
            .arg(request)
            .arg(image)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn write_at(image: &Path, offset: u64, bytes: &[u8]) {
        let mut file = std::fs::OpenOptions::new().write(true).open(image).unwrap();
        file.seek(SeekFrom::Start(offset)).unwrap();
        file.write_all(bytes).unwrap();
    }

    /// Garbage over the first block of the directory `/home/a`.
    fn corrupt_directory(image: &Path) {
        let blocks = debugfs(image, "blocks /home/a");
        let block: u64 = blocks.trim().parse().unwrap_or_else(|_| panic!("{blocks}"));
        write_at(image, block * 4096, &[0x5A; 4096]);
    }

    fn superblock(image: &Path) -> Vec<u8> {
        let mut file = std::fs::File::open(image).unwrap();
        file.seek(SeekFrom::Start(SB)).unwrap();
        let mut sb = vec![0u8; 1024];
        file.read_exact(&mut sb).unwrap();
        sb
    }

    /// Rewrites the superblock with `edit` applied and its checksum made right again, as a
    /// guest that knows the format would.
    fn edit_superblock(image: &Path, edit: impl FnOnce(&mut [u8])) {
        let mut sb = superblock(image);
        edit(&mut sb);
        let sum = crc32c(!0, &sb[..0x3FC]);
        sb[0x3FC..].copy_from_slice(&sum.to_le_bytes());
        write_at(image, SB, &sb);
    }

    /// CRC-32C with no final inversion (how ext4 stores its checksums).
    fn crc32c(mut crc: u32, bytes: &[u8]) -> u32 {
        for &b in bytes {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }

    /// Refused by the full check, with the reason, and byte for byte as it was.
    fn assert_refused(image: &Path) -> String {
        let before = hash(image);
        let err = check_guest_written_volume(image).unwrap_err();
        assert!(matches!(err, ImageError::VolumeRefused { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("e2fsck"), "{msg}");
        assert!(
            msg.contains("start the box on a VM runtime")
                || msg.contains("Start the box on a VM runtime"),
            "{msg}"
        );
        assert_eq!(hash(image), before, "the refused image was changed");
        assert!(!undo_path(image).exists());
        msg
    }

    #[test]
    fn a_fresh_volume_passes_and_is_left_as_it_was() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = fresh(dir.path());
        let before = hash(&image);
        let started = std::time::Instant::now();
        check_guest_written_volume(&image).unwrap();
        eprintln!(
            "full check of a fresh 64 MiB volume: {:?}",
            started.elapsed()
        );
        assert_eq!(hash(&image), before);
    }

    /// The superblock says "cleanly unmounted" (what the routine check believes) over a
    /// directory block of garbage.
    #[test]
    fn a_clean_flag_over_a_corrupt_directory_is_refused() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = fresh(dir.path());
        corrupt_directory(&image);
        assert!(crate::volume_usage::cleanly_unmounted(&image).unwrap());
        // What the start did before: the clean flag alone, and the image is "clean".
        assert_eq!(check_volume(&image).unwrap(), FsckOutcome::Clean);
        let msg = assert_refused(&image);
        assert!(msg.contains(FULL), "{msg}");
    }

    /// A directory entry naming an ancestor: a loop a walk of the tree never leaves.
    #[test]
    fn a_directory_loop_is_refused() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = fresh(dir.path());
        crate::ext4::debugfs_write(&image, "ln /home /home/a/b/up\n").unwrap();
        assert!(debugfs(&image, "ls -l /home/a/b").contains("up"));
        assert!(crate::volume_usage::cleanly_unmounted(&image).unwrap());
        assert_refused(&image);
    }

    /// Inode and block counts far past what the image holds, with a valid checksum: e2fsck
    /// would size its tables from them.
    #[test]
    fn absurd_counts_in_the_superblock_are_refused() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = fresh(dir.path());
        edit_superblock(&image, |sb| {
            sb[0..4].copy_from_slice(&u32::MAX.to_le_bytes()); // s_inodes_count
            sb[4..8].copy_from_slice(&u32::MAX.to_le_bytes()); // s_blocks_count_lo
            sb[0x150..0x154].copy_from_slice(&0xFFFFu32.to_le_bytes()); // s_blocks_count_hi
            sb[40..44].copy_from_slice(&u32::MAX.to_le_bytes()); // s_inodes_per_group
        });
        eprintln!("{}", assert_refused(&image));
    }

    /// `errors=panic` is a valid setting, so the check passes it: the host's mount
    /// overrides it (`errors=remount-ro`, tested in the runtime). With damage, refused.
    #[test]
    fn errors_panic_passes_the_check_and_with_damage_is_refused() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = fresh(dir.path());
        crate::ext4::debugfs_write(&image, "ssv errors 3\n").unwrap();
        assert_eq!(superblock(&image)[60], 3, "s_errors = EXT2_ERRORS_PANIC");
        check_guest_written_volume(&image).unwrap();
        corrupt_directory(&image);
        assert_refused(&image);
    }

    /// A journal with transactions to replay (a guest killed mid-write): replayed, checked,
    /// kept. With a corrupt directory behind the journal: the replay is undone and the image
    /// is refused byte for byte as it came.
    #[test]
    fn a_journal_is_replayed_before_the_check_and_undone_on_refusal() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = fresh(dir.path());
        // Mark the journal as holding transactions (as a kill leaves it): e2fsck replays
        // what it finds (here nothing but the flag) and clears it.
        let set_recover = |image: &Path| {
            edit_superblock(image, |sb| {
                let incompat = u32::from_le_bytes(sb[96..100].try_into().unwrap());
                sb[96..100].copy_from_slice(&(incompat | 0x4).to_le_bytes());
            })
        };
        set_recover(&image);
        assert!(crate::volume_usage::needs_recovery(&image).unwrap());
        check_guest_written_volume(&image).unwrap();
        assert!(
            !crate::volume_usage::needs_recovery(&image).unwrap(),
            "replayed"
        );

        corrupt_directory(&image);
        set_recover(&image);
        let msg = assert_refused(&image);
        assert!(msg.contains(FULL), "{msg}");
        assert!(
            crate::volume_usage::needs_recovery(&image).unwrap(),
            "the replay was undone"
        );
    }
}
