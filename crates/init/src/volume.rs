//! The `volume` phase: the box's own volume is bind-mounted (sandbox) at `/home/user` and
//! `/memory`. On the first boot `/memory` gets its skeleton; existing content is never
//! touched. Everything created here belongs to the box user.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use berth_protocol::guest::BOX_USER_UID;

pub const MEMORY_DIRS: [&str; 4] = ["entities", "comms", "timeline", "workstreams"];

pub const MEMORY_README: &str = "\
# Persistent memory

This folder survives every reclaim of the box: when the box sleeps, its processes stop,
but everything under /memory (and /home/user) is kept and is here again on the next wake.
The host can read, search and back it up without waking the box.

A suggested layout:

- `entities/`    one file per person, project, or thing worth remembering
- `comms/`       notes on conversations and messages
- `timeline/`    dated entries: what happened, what was decided
- `workstreams/` ongoing tasks, their state and next steps

Keep files small and plain (Markdown), so they are easy to grep.
";

#[derive(Debug, thiserror::Error)]
#[error("volume phase: cannot prepare {path}")]
pub struct VolumeError {
    path: PathBuf,
    #[source]
    source: io::Error,
}

/// Ensures the home directory exists and `/memory` has its skeleton. Returns what was
/// created (empty on every boot but the first).
pub fn prepare(home: &Path, memory: &Path) -> Result<Vec<PathBuf>, VolumeError> {
    let mut created = Vec::new();
    ensure_dir(home, &mut created)?;
    ensure_dir(memory, &mut created)?;
    for dir in MEMORY_DIRS {
        ensure_dir(&memory.join(dir), &mut created)?;
    }
    let readme = memory.join("README.md");
    let err = |source| VolumeError {
        path: readme.clone(),
        source,
    };
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&readme)
    {
        Ok(mut file) => {
            file.write_all(MEMORY_README.as_bytes()).map_err(err)?;
            give_to_user(&readme).map_err(err)?;
            created.push(readme.clone());
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(err(e)),
    }
    Ok(created)
}

fn ensure_dir(path: &Path, created: &mut Vec<PathBuf>) -> Result<(), VolumeError> {
    let err = |source| VolumeError {
        path: path.to_owned(),
        source,
    };
    match fs::DirBuilder::new().mode(0o755).create(path) {
        Ok(()) => {
            give_to_user(path).map_err(err)?;
            created.push(path.to_owned());
            Ok(())
        }
        // Already there (a directory, or whatever the user made of it): leave it alone.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// Hands a new path to the box user (when running as root, which PID 1 always is).
fn give_to_user(path: &Path) -> io::Result<()> {
    if nix::unistd::geteuid().is_root() {
        std::os::unix::fs::lchown(path, Some(BOX_USER_UID), Some(BOX_USER_UID))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_skeleton_is_made_once_and_never_overwritten() {
        let root = tempfile::tempdir().unwrap();
        let (home, memory) = (root.path().join("home/user"), root.path().join("memory"));
        fs::create_dir_all(root.path().join("home")).unwrap();
        let created = prepare(&home, &memory).unwrap();
        assert_eq!(created.len(), 7);
        for dir in MEMORY_DIRS {
            assert!(memory.join(dir).is_dir());
        }
        assert!(fs::read_to_string(memory.join("README.md"))
            .unwrap()
            .starts_with("# Persistent memory"));
        if nix::unistd::geteuid().is_root() {
            let meta = fs::metadata(memory.join("entities")).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (BOX_USER_UID, BOX_USER_UID));
            assert_eq!(
                fs::metadata(memory.join("README.md")).unwrap().uid(),
                BOX_USER_UID
            );
        }
        fs::write(memory.join("README.md"), "mine").unwrap();
        fs::remove_dir(memory.join("comms")).unwrap();
        let again = prepare(&home, &memory).unwrap();
        assert_eq!(again, [memory.join("comms")]);
        assert_eq!(
            fs::read_to_string(memory.join("README.md")).unwrap(),
            "mine"
        );
    }
}
