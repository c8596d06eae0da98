//! Spare empty volumes, made ahead of need, so a new box's first start renames one into
//! place instead of running `mkfs.ext4` on its path (the largest step of a cold start that
//! berth owns: ~10 ms of a ~50 ms start on a quiet host).
//!
//! One spare per size at most, for the last [`MAX_SIZES`] sizes asked for; a spare is made
//! in the background (at a lower CPU priority) after a size's spare is taken or found
//! missing. Every spare is an ordinary [`crate::create_volume`] (its own mkfs, so its own
//! file system UUID), made under a scratch name and renamed into the stock whole.
//!
//! A stock lives as long as its owner: opening one empties its directory, so a spare made
//! by an older release (an older volume layout) is never handed out, and a crash leaves
//! nothing that a restart keeps. Dropping the stock waits for a refill under way (a few
//! milliseconds), so no mkfs outlives it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;

use crate::error::ImageError;
use crate::volume::{create_volume, ensure_volume_with, VolumeChange};

/// Sizes kept in stock at once (templates rarely differ in disk size).
pub const MAX_SIZES: usize = 4;

/// How much lower than the daemon a refill's mkfs runs: a start in progress comes first.
const REFILL_NICE: libc::c_int = 10;

#[derive(Debug)]
pub struct VolumeStock {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// Most recently asked for last.
    sizes: VecDeque<u64>,
    refills: Vec<JoinHandle<()>>,
}

impl VolumeStock {
    /// A stock in `dir`, emptied of anything an earlier process left.
    pub fn open(dir: &Path) -> std::io::Result<VolumeStock> {
        // A spare an earlier owner of the dir is still writing (a daemon killed in this very
        // process, in tests) can land while the dir is being removed: removing again ends
        // once that writer has.
        let mut attempts = 0;
        loop {
            match std::fs::remove_dir_all(dir) {
                Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty && attempts < 100 => {
                    attempts += 1;
                }
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => break,
            }
        }
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        Ok(VolumeStock {
            dir: dir.into(),
            state: Arc::default(),
        })
    }

    /// [`crate::ensure_volume`], but a missing volume is a spare renamed into place when
    /// one is in stock; either way a new spare of that size is then made in the background.
    pub fn ensure_volume(&self, path: &Path, size_mib: u64) -> Result<VolumeChange, ImageError> {
        let change = ensure_volume_with(path, size_mib, |path| {
            if self.take(path, size_mib) {
                Ok(())
            } else {
                create_volume(path, size_mib)
            }
        })?;
        if change == VolumeChange::Created {
            self.refill(size_mib);
        }
        Ok(change)
    }

    fn spare(&self, size_mib: u64) -> PathBuf {
        self.dir.join(format!("{size_mib}.ext4"))
    }

    /// Moves the spare of `size_mib` to `path`; false when there is none (or it cannot be
    /// moved there, e.g. another file system: the caller makes one instead).
    fn take(&self, path: &Path, size_mib: u64) -> bool {
        match std::fs::rename(self.spare(size_mib), path) {
            Ok(()) => true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot take a spare volume; making one");
                false
            }
        }
    }

    /// Makes a spare of `size_mib` in the background unless one is there or under way.
    fn refill(&self, size_mib: u64) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.refills.retain(|h| !h.is_finished());
        state.sizes.retain(|&s| s != size_mib);
        state.sizes.push_back(size_mib);
        while state.sizes.len() > MAX_SIZES {
            if let Some(old) = state.sizes.pop_front() {
                let _ = std::fs::remove_file(self.spare(old));
            }
        }
        let spare = self.spare(size_mib);
        let shared = self.state.clone();
        let refill = std::thread::Builder::new()
            .name("volume-stock".into())
            .spawn(move || make_spare(&spare, size_mib, &shared));
        match refill {
            Ok(handle) => state.refills.push(handle),
            Err(e) => tracing::warn!(error = %e, "cannot start a volume refill"),
        }
    }
}

fn make_spare(spare: &Path, size_mib: u64, state: &Mutex<State>) {
    // SAFETY: setpriority on this thread (who 0 = the calling thread on Linux) only; the
    // mkfs it forks inherits it.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, REFILL_NICE) };
    if spare.exists() {
        return;
    }
    if let Err(e) = create_volume(spare, size_mib) {
        tracing::warn!(spare = %spare.display(), error = %e, "cannot make a spare volume; the next new box makes its own");
        return;
    }
    // Evicted while it was being made: not kept.
    let wanted = state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .sizes
        .contains(&size_mib);
    if !wanted {
        let _ = std::fs::remove_file(spare);
    }
}

impl Drop for VolumeStock {
    fn drop(&mut self) {
        let refills = std::mem::take(
            &mut self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .refills,
        );
        for refill in refills {
            let _ = refill.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn can_make_volumes() -> bool {
        let ok = std::process::Command::new("mkfs.ext4")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            berth_testkit::skip("e2fsprogs", "mkfs.ext4 is not installed");
        }
        ok
    }

    fn uuid(image: &Path) -> String {
        let out = std::process::Command::new("dumpe2fs")
            .arg("-h")
            .arg(image)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("Filesystem UUID:"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// Waits for the background refill of `size` to finish (joins it).
    fn settle(stock: &VolumeStock) {
        let refills = std::mem::take(&mut stock.state.lock().unwrap().refills);
        for refill in refills {
            refill.join().unwrap();
        }
    }

    #[test]
    fn a_new_box_takes_a_spare_with_its_own_uuid_and_a_new_spare_follows() {
        if !can_make_volumes() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let stock = VolumeStock::open(&dir.path().join("stock")).unwrap();
        let first = dir.path().join("a.ext4");
        assert_eq!(
            stock.ensure_volume(&first, 64).unwrap(),
            VolumeChange::Created
        );
        settle(&stock);
        let spare = stock.spare(64);
        assert!(spare.exists(), "no spare was made after the first volume");
        let spare_uuid = uuid(&spare);
        let second = dir.path().join("b.ext4");
        assert_eq!(
            stock.ensure_volume(&second, 64).unwrap(),
            VolumeChange::Created
        );
        assert_eq!(
            uuid(&second),
            spare_uuid,
            "the second volume is not the spare"
        );
        assert_ne!(uuid(&first), uuid(&second));
        crate::check_volume(&second).unwrap();
        settle(&stock);
        assert!(spare.exists(), "the spare was not made again");
        assert_ne!(
            uuid(&spare),
            spare_uuid,
            "two boxes would share a file system UUID"
        );
        // An existing volume is left alone, and takes nothing from the stock.
        assert_eq!(
            stock.ensure_volume(&second, 64).unwrap(),
            VolumeChange::Unchanged
        );
        assert!(spare.exists());
    }

    #[test]
    fn opening_empties_what_an_earlier_stock_left_and_sizes_are_bounded() {
        if !can_make_volumes() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let stock_dir = dir.path().join("stock");
        std::fs::create_dir_all(stock_dir.join(".volume-half")).unwrap();
        std::fs::write(stock_dir.join("64.ext4"), b"an older release's layout").unwrap();
        let stock = VolumeStock::open(&stock_dir).unwrap();
        assert_eq!(std::fs::read_dir(&stock_dir).unwrap().count(), 0);
        for (i, size) in (16..).step_by(16).take(MAX_SIZES + 1).enumerate() {
            stock
                .ensure_volume(&dir.path().join(format!("{i}.ext4")), size)
                .unwrap();
            settle(&stock);
        }
        let spares = std::fs::read_dir(&stock_dir).unwrap().count();
        assert_eq!(spares, MAX_SIZES, "one spare per recent size, no more");
        assert!(!stock.spare(16).exists(), "the oldest size was not dropped");
    }
}
