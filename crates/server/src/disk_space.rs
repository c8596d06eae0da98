//! The data dir's free space. A box must never fill the host's disk: below the threshold
//! (`[storage] min_free_percent`, default 5 %) the daemon refuses what would take more of
//! it (new boxes, growing a volume) and keeps serving everything else. A watcher logs when
//! the disk crosses the threshold either way, so an operator sees it before a box does.
//!
//! Volumes are sparse: a new box takes almost nothing until it writes, so free space alone
//! would admit any number of them. What they may still take (each volume's size less what
//! it already takes on disk) counts against the threshold too, divided by `[storage]
//! overcommit` (default 1.0: every promised byte must be free).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The default threshold, in percent of the data dir's file system.
pub const DEFAULT_MIN_FREE_PERCENT: f64 = 5.0;
/// How often the watcher looks.
const WATCH_EVERY: Duration = Duration::from_secs(10);

/// The free space of one file system, as unprivileged processes may use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    pub free_bytes: u64,
    pub total_bytes: u64,
}

impl Space {
    /// `free` over `total`, in percent (0 when the size is unknown).
    pub fn free_percent(&self) -> f64 {
        if self.total_bytes == 0 {
            return 0.0;
        }
        self.free_bytes as f64 * 100.0 / self.total_bytes as f64
    }
}

/// The data dir has less free space than the threshold, counting what sparse volumes may
/// still take. The message names no path (tenants read it); `path` is for the log.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "the data dir's disk is nearly full ({} MiB free of {} MiB, {} MiB of it promised to \
     sparse volumes at overcommit {overcommit}, leaving {:.1} % < {min_free_percent} %): cannot \
     {action}; free space on the data dir's file system, delete boxes, or raise [storage] \
     overcommit, then retry",
    space.free_bytes >> 20, space.total_bytes >> 20, promised_bytes >> 20, left_percent
)]
pub struct DiskLow {
    pub action: &'static str,
    pub path: PathBuf,
    pub space: Space,
    /// What volumes may still take (the new one's included), before the overcommit ratio.
    pub promised_bytes: u64,
    pub overcommit: f64,
    /// Free space less the promised bytes over the ratio, in percent of the disk.
    pub left_percent: f64,
    pub min_free_percent: f64,
}

/// Checks the data dir's free space against the threshold.
#[derive(Debug, Clone)]
pub struct DiskGuard {
    data_dir: PathBuf,
    min_free_percent: f64,
    overcommit: f64,
    /// Held from summing the promises to recording a new one (clones share it).
    promises: Arc<Mutex<()>>,
}

impl DiskGuard {
    /// No overcommit of sparse volumes ([`DiskGuard::with_overcommit`] sets it).
    pub fn new(data_dir: &Path, min_free_percent: f64) -> DiskGuard {
        DiskGuard {
            data_dir: data_dir.to_path_buf(),
            min_free_percent,
            overcommit: 1.0,
            promises: Arc::default(),
        }
    }

    /// Hold while checking a new promise ([`DiskGuard::check_promised`]) and recording it
    /// (the new box's row): two creates cannot both count the same free space.
    pub fn promising(&self) -> MutexGuard<'_, ()> {
        // The guarded data is the store's rows; a panic leaves nothing half-done here.
        self.promises.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sparse volumes may promise `ratio` times the free space (`[storage] overcommit`).
    pub fn with_overcommit(self, ratio: f64) -> DiskGuard {
        DiskGuard {
            overcommit: ratio.max(1.0),
            ..self
        }
    }

    /// The data dir's file system now; `None` when it cannot be read (then nothing is
    /// refused: the guard must not stop a daemon whose disk it cannot see).
    pub fn space(&self) -> Option<Space> {
        space_of(&self.data_dir)
    }

    /// `Err` when `action` (which takes disk) must wait for free space.
    pub fn check(&self, action: &'static str) -> Result<(), DiskLow> {
        self.check_promised(action, 0)
    }

    /// `Err` when `action` must wait for free space, counting `promised_bytes` (what the
    /// boxes' sparse volumes may still take, with the action's own) over the overcommit
    /// ratio as taken.
    pub fn check_promised(&self, action: &'static str, promised_bytes: u64) -> Result<(), DiskLow> {
        let Some(space) = self.space() else {
            return Ok(());
        };
        let left = space.free_bytes as f64 - promised_bytes as f64 / self.overcommit;
        let left_percent = if space.total_bytes == 0 {
            0.0
        } else {
            left * 100.0 / space.total_bytes as f64
        };
        if left_percent >= self.min_free_percent {
            return Ok(());
        }
        Err(DiskLow {
            action,
            path: self.data_dir.clone(),
            space,
            promised_bytes,
            overcommit: self.overcommit,
            left_percent,
            min_free_percent: self.min_free_percent,
        })
    }

    /// The volume size a start asks for: `wanted_mib`, but never less than the existing
    /// `image` (volumes never shrink: a lowered template size leaves bigger volumes as
    /// they are), and not more while the disk is low counting `promised_bytes` (every
    /// volume's, the growth included): then its current size, with a warning (the box
    /// starts; its volume grows at a later start once space is back).
    pub fn volume_mib_for_start(&self, image: &Path, wanted_mib: u64, promised_bytes: u64) -> u64 {
        let Ok(current) = std::fs::metadata(image).map(|m| m.len() >> 20) else {
            return wanted_mib;
        };
        if current >= wanted_mib {
            return current;
        }
        match self.check_promised("grow a box volume", promised_bytes) {
            Ok(()) => wanted_mib,
            Err(low) => {
                tracing::warn!(image = %image.display(), current_mib = current, wanted_mib, error = %low, "volume not grown");
                current
            }
        }
    }

    /// Logs every crossing of the threshold (and the state at start when low).
    pub fn watch(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut low = false;
            loop {
                match self.check("take more disk") {
                    Err(e) if !low => {
                        low = true;
                        tracing::error!(path = %e.path.display(), error = %e, "disk space low: new boxes and volume growth are refused");
                    }
                    Ok(()) if low => {
                        low = false;
                        tracing::info!(path = %self.data_dir.display(), "disk space back above the threshold");
                    }
                    _ => {}
                }
                tokio::time::sleep(WATCH_EVERY).await;
            }
        })
    }
}

fn space_of(path: &Path) -> Option<Space> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: statvfs writes one struct statvfs into the buffer we own; read only on success.
    let stat = unsafe {
        if libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    let unit = stat.f_frsize as u64;
    Some(Space {
        free_bytes: stat.f_bavail as u64 * unit,
        total_bytes: stat.f_blocks as u64 * unit,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_below_the_threshold_only() {
        let dir = tempfile::tempdir().unwrap();
        let space = space_of(dir.path()).expect("statvfs of a temp dir");
        assert!(space.total_bytes > 0 && space.free_bytes <= space.total_bytes);
        let percent = space.free_percent();
        DiskGuard::new(dir.path(), 0.0)
            .check("create a box")
            .unwrap();
        let err = DiskGuard::new(dir.path(), percent + 1.0)
            .check("create a box")
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("cannot create a box"), "{text}");
        assert!(
            !text.contains(&dir.path().display().to_string()),
            "a tenant reads it: {text}"
        );
    }

    #[test]
    fn a_volume_grows_at_start_unless_the_disk_is_low() {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("volume.ext4");
        let low = DiskGuard::new(dir.path(), 100.0);
        let fine = DiskGuard::new(dir.path(), 0.0);
        // No image yet: made at the size asked for (sparse: it takes no space).
        assert_eq!(low.volume_mib_for_start(&image, 1024, 0), 1024);
        std::fs::File::create(&image)
            .unwrap()
            .set_len(512 << 20)
            .unwrap();
        assert_eq!(fine.volume_mib_for_start(&image, 1024, 0), 1024);
        assert_eq!(
            low.volume_mib_for_start(&image, 1024, 0),
            512,
            "grown while low"
        );
        assert_eq!(
            low.volume_mib_for_start(&image, 256, 0),
            512,
            "never shrunk"
        );
        // Promised space past the free space keeps the volume as it is, unless overcommit
        // allows it.
        let free = space_of(dir.path()).unwrap().free_bytes;
        assert_eq!(fine.volume_mib_for_start(&image, 1024, free * 2), 512);
        let loose = fine.clone().with_overcommit(4.0);
        assert_eq!(loose.volume_mib_for_start(&image, 1024, free * 2), 1024);
    }

    #[test]
    fn an_unreadable_path_refuses_nothing() {
        DiskGuard::new(Path::new("/nonexistent/berth"), 100.0)
            .check("create a box")
            .unwrap();
    }
}
