//! One daemon per data directory. A second one would reconcile (stop) the first one's
//! boxes before failing to listen, so `Server::bind` takes this lock before anything else.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::ServerError;

/// The lock file that marks a data directory as in use by a running daemon.
pub const LOCK_FILE: &str = "berth.lock";

/// How long a lock that looks held is looked at again before it counts as held.
const HELD_FOR_SURE_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// An exclusive `flock` on `<data_dir>/berth.lock`, released when dropped (also when the
/// daemon crashes: the kernel drops it with the descriptor).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    pub fn acquire(data_dir: &Path) -> Result<DataDirLock, ServerError> {
        let path = data_dir.join(LOCK_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| ServerError::Io {
                action: "open",
                path: path.clone(),
                source,
            })?;
        // A lock just released can look held for a moment: a process forked meanwhile holds
        // the descriptor until it execs (a daemon in a test shares its process with others
        // that start programs). A held lock is only an answer once that moment has passed.
        let began = std::time::Instant::now();
        // SAFETY: flock on a descriptor we own and keep open; it touches no memory.
        while unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let source = std::io::Error::last_os_error();
            if source.kind() == std::io::ErrorKind::WouldBlock {
                if began.elapsed() < HELD_FOR_SURE_AFTER {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                    continue;
                }
                return Err(ServerError::DataDirInUse {
                    path: data_dir.to_path_buf(),
                });
            }
            return Err(ServerError::Io {
                action: "lock",
                path,
                source,
            });
        }
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_has_one_daemon_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        let err = DataDirLock::acquire(dir.path()).unwrap_err();
        assert!(matches!(err, ServerError::DataDirInUse { .. }), "{err}");
        drop(first);
        DataDirLock::acquire(dir.path()).unwrap();
    }
}
