//! A VM's console and VMM logs as bounded rings on disk. The guest writes its serial
//! console without end if it likes (a box root printing forever), and the VMM appends it
//! to `console.log`; left alone that file fills the host's disk.
//!
//! While a VM runs, each log's blocks before its last [`KEEP_BYTES`] are freed with
//! `fallocate(PUNCH_HOLE)` whenever it holds more than twice that on disk: the file keeps
//! its length (so the offsets a boot recorded, `console.start`, stay true, and the VMM's
//! `O_APPEND` writes go on at the end) but its old head reads as zeros and takes no space.
//! The boot wait and the exit reason read only the tail of the current boot, which is
//! kept. Every file system berth runs on (ext4, xfs, btrfs, tmpfs) punches holes.

use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

/// What each log keeps of its end.
pub(crate) const KEEP_BYTES: u64 = 1 << 20;
/// How often a running VM's logs are looked at: a guest printing flat out under TCG adds a
/// few MiB in that time.
pub(crate) const TRIM_EVERY: Duration = Duration::from_secs(1);
const BLOCK: u64 = 4096;

/// Frees the blocks of `path` before its last [`KEEP_BYTES`] when it holds more than twice
/// that on disk. Returns the bytes freed (0 when nothing needed doing or it cannot be).
pub(crate) fn trim(path: &Path) -> u64 {
    let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) else {
        return 0;
    };
    let Ok(meta) = file.metadata() else { return 0 };
    let on_disk = meta.blocks() * 512;
    if on_disk <= 2 * KEEP_BYTES {
        return 0;
    }
    let end = meta.len().saturating_sub(KEEP_BYTES) / BLOCK * BLOCK;
    // SAFETY: fallocate on an fd we own, with integer arguments.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            end as libc::off_t,
        )
    };
    if rc != 0 {
        tracing::warn!(path = %path.display(), error = %std::io::Error::last_os_error(), "cannot trim a VM log");
        return 0;
    }
    on_disk.saturating_sub(file.metadata().map_or(on_disk, |m| m.blocks() * 512))
}

/// Trims `logs` every [`TRIM_EVERY`], for as long as it is polled (next to the wait for the
/// VMM's end). Never resolves; cancel-safe.
pub(crate) async fn keep_bounded(logs: &[&Path]) {
    loop {
        for log in logs {
            trim(log);
        }
        tokio::time::sleep(TRIM_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_log_past_its_bound_keeps_its_tail_its_length_and_no_more_disk() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("console.log");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        file.write_all(b"berth-init: ready\n").unwrap();
        let start = std::fs::metadata(&log).unwrap().len();
        let line = [b'x'; 1023];
        for _ in 0..(8 << 10) {
            file.write_all(&line).unwrap();
            file.write_all(b"\n").unwrap();
        }
        file.write_all(b"the end\n").unwrap();
        let len = std::fs::metadata(&log).unwrap().len();
        assert!(trim(&log) > 0, "8 MiB were not trimmed");
        let meta = std::fs::metadata(&log).unwrap();
        assert_eq!(meta.len(), len, "the length changed");
        assert!(
            meta.blocks() * 512 <= KEEP_BYTES + 2 * BLOCK,
            "{} on disk",
            meta.blocks() * 512
        );
        // The VMM keeps appending at the end; offsets recorded earlier still hold.
        file.write_all(b"after\n").unwrap();
        let tail = crate::process::log_tail(&log, 64, 2).unwrap();
        assert_eq!(tail, "the end\nafter");
        let text = std::fs::read(&log).unwrap();
        assert!(text[start as usize..][..4096].iter().all(|&b| b == 0));
        assert_eq!(trim(&log), 0, "trimmed twice");
    }
}
