//! The `volume` phase: the box's own volume is bind-mounted (sandbox) at `/home/user` and
//! `/memory`. On the volume's first boot `/memory` gets its skeleton from the template's
//! layout (`<run dir>/memory.json`, the default when absent): a `README.md` naming whose
//! memory it is, and each folder with a one-line `README.md` of what belongs there. A
//! root-only marker in the state dir says it was done, so what the agent later removes or
//! rewrites stays its own; nothing already there is ever overwritten (a volume from before
//! the marker keeps its README and gets only the folders it lacks, once). Everything
//! created in `/memory` belongs to the box user.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use berth_protocol::guest::BOX_USER_UID;
use berth_protocol::memory::{MemoryLayout, MAX_LAYOUT_BYTES, MEMORY_LAYOUT_FILE};

#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    #[error("volume phase: cannot prepare {path}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("volume phase: the memory layout {path} is not valid: {why}")]
    Layout { path: PathBuf, why: String },
}

/// The top `README.md` of a layout.
pub fn memory_readme(layout: &MemoryLayout) -> String {
    let mut text = format!(
        "# Persistent memory of [[{}]]\n\n\
This folder survives every reclaim of the box: when the box sleeps, its processes stop,\n\
but everything under /memory (and /home/user) is kept and is here again on the next wake.\n\
The host can read, search and back it up without waking the box.\n",
        layout.owner
    );
    if !layout.folders.is_empty() {
        text.push_str("\nA suggested layout:\n\n");
        for folder in &layout.folders {
            text.push_str(&format!("- `{}/`: {}\n", folder.name, folder.about));
        }
    }
    text.push_str("\nKeep files small and plain (Markdown), so they are easy to grep. Link notes with\n[[name]], which means `entities/name.md`.\n");
    text
}

/// Reads the layout the host left in `run_dir` (the default when there is none).
pub fn layout(run_dir: &Path) -> Result<MemoryLayout, VolumeError> {
    let path = run_dir.join(MEMORY_LAYOUT_FILE);
    let file = match fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(MemoryLayout::default()),
        Err(source) => return Err(VolumeError::Prepare { path, source }),
    };
    let mut raw = Vec::new();
    file.take(MAX_LAYOUT_BYTES + 1)
        .read_to_end(&mut raw)
        .map_err(|source| VolumeError::Prepare {
            path: path.clone(),
            source,
        })?;
    if raw.len() as u64 > MAX_LAYOUT_BYTES {
        return Err(VolumeError::Layout {
            path,
            why: format!("larger than {MAX_LAYOUT_BYTES} bytes"),
        });
    }
    let layout: MemoryLayout = serde_json::from_slice(&raw).map_err(|e| VolumeError::Layout {
        path: path.clone(),
        why: e.to_string(),
    })?;
    layout
        .check()
        .map_err(|why| VolumeError::Layout { path, why })?;
    Ok(layout)
}

/// The state dir's marker of a seeded `/memory`.
pub const SEEDED_MARKER: &str = "memory-seeded";

/// Ensures the home directory exists and, on the volume's first boot (no marker in
/// `state_dir`), that `/memory` has the skeleton of `layout`. Returns what was created in
/// them (empty on every boot but the first).
pub fn prepare(
    home: &Path,
    memory: &Path,
    state_dir: &Path,
    layout: &MemoryLayout,
) -> Result<Vec<PathBuf>, VolumeError> {
    let mut created = Vec::new();
    ensure_dir(home, &mut created)?;
    ensure_dir(memory, &mut created)?;
    let marker = state_dir.join(SEEDED_MARKER);
    if marker.exists() {
        return Ok(created);
    }
    write_new(
        &memory.join("README.md"),
        &memory_readme(layout),
        &mut created,
    )?;
    for folder in &layout.folders {
        let dir = memory.join(&folder.name);
        if ensure_dir(&dir, &mut created)? {
            write_new(
                &dir.join("README.md"),
                &format!("{}\n", folder.about),
                &mut created,
            )?;
        }
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state_dir)
        .and_then(|()| fs::write(&marker, b""))
        .map_err(|source| VolumeError::Prepare {
            path: marker.clone(),
            source,
        })?;
    Ok(created)
}

/// Creates `path` with `text` unless something is there already.
fn write_new(path: &Path, text: &str, created: &mut Vec<PathBuf>) -> Result<(), VolumeError> {
    let err = |source| VolumeError::Prepare {
        path: path.to_owned(),
        source,
    };
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)
    {
        Ok(mut file) => {
            file.write_all(text.as_bytes()).map_err(err)?;
            give_to_user(path).map_err(err)?;
            created.push(path.to_owned());
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// `true` when this call made the directory.
fn ensure_dir(path: &Path, created: &mut Vec<PathBuf>) -> Result<bool, VolumeError> {
    let err = |source| VolumeError::Prepare {
        path: path.to_owned(),
        source,
    };
    match fs::DirBuilder::new().mode(0o755).create(path) {
        Ok(()) => {
            give_to_user(path).map_err(err)?;
            created.push(path.to_owned());
            Ok(true)
        }
        // Already there (a directory, or whatever the user made of it): leave it alone.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
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
    use berth_protocol::memory::MemoryFolder;
    use std::os::unix::fs::MetadataExt;

    struct Dirs {
        _root: tempfile::TempDir,
        home: PathBuf,
        memory: PathBuf,
        state: PathBuf,
    }

    fn dirs() -> Dirs {
        let root = tempfile::tempdir().unwrap();
        let (home, memory, state) = (
            root.path().join("home/user"),
            root.path().join("memory"),
            root.path().join("state"),
        );
        fs::create_dir_all(root.path().join("home")).unwrap();
        fs::create_dir_all(&state).unwrap();
        Dirs {
            _root: root,
            home,
            memory,
            state,
        }
    }

    #[test]
    fn the_default_skeleton_is_made_once_and_never_overwritten() {
        let d = dirs();
        let layout = MemoryLayout::default();
        let created = prepare(&d.home, &d.memory, &d.state, &layout).unwrap();
        // home, memory, README.md, and each folder with its README.md.
        assert_eq!(created.len(), 3 + 2 * layout.folders.len());
        for folder in &layout.folders {
            assert!(d.memory.join(&folder.name).is_dir());
            let about = fs::read_to_string(d.memory.join(&folder.name).join("README.md")).unwrap();
            assert_eq!(about, format!("{}\n", folder.about));
        }
        let readme = fs::read_to_string(d.memory.join("README.md")).unwrap();
        assert!(
            readme.starts_with("# Persistent memory of [[user]]"),
            "{readme}"
        );
        if nix::unistd::geteuid().is_root() {
            let meta = fs::metadata(d.memory.join("entities")).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (BOX_USER_UID, BOX_USER_UID));
            assert_eq!(
                fs::metadata(d.memory.join("README.md")).unwrap().uid(),
                BOX_USER_UID
            );
        }
        // The agent's own changes stay: nothing comes back on later boots.
        fs::write(d.memory.join("README.md"), "mine").unwrap();
        fs::remove_dir_all(d.memory.join("comms")).unwrap();
        assert!(prepare(&d.home, &d.memory, &d.state, &layout)
            .unwrap()
            .is_empty());
        assert_eq!(
            fs::read_to_string(d.memory.join("README.md")).unwrap(),
            "mine"
        );
        assert!(!d.memory.join("comms").exists());
    }

    #[test]
    fn a_templates_layout_names_the_owner_and_its_folders() {
        let d = dirs();
        let layout = MemoryLayout {
            owner: "Alice".into(),
            folders: vec![MemoryFolder {
                name: "recipes".into(),
                about: "One file per dish.".into(),
            }],
        };
        prepare(&d.home, &d.memory, &d.state, &layout).unwrap();
        let readme = fs::read_to_string(d.memory.join("README.md")).unwrap();
        assert!(
            readme.starts_with("# Persistent memory of [[Alice]]"),
            "{readme}"
        );
        assert!(
            readme.contains("- `recipes/`: One file per dish."),
            "{readme}"
        );
        assert!(!d.memory.join("entities").exists());
        assert_eq!(
            fs::read_to_string(d.memory.join("recipes/README.md")).unwrap(),
            "One file per dish.\n"
        );
    }

    #[test]
    fn a_volume_from_before_the_marker_keeps_its_files_and_gets_what_it_lacks_once() {
        let d = dirs();
        fs::create_dir_all(d.memory.join("entities")).unwrap();
        fs::write(d.memory.join("README.md"), "old readme").unwrap();
        fs::write(d.memory.join("entities/README.md"), "old").unwrap();
        let created = prepare(&d.home, &d.memory, &d.state, &MemoryLayout::default()).unwrap();
        assert!(!created.contains(&d.memory.join("README.md")));
        assert!(created.contains(&d.memory.join("timeline")));
        assert_eq!(
            fs::read_to_string(d.memory.join("README.md")).unwrap(),
            "old readme"
        );
        assert_eq!(
            fs::read_to_string(d.memory.join("entities/README.md")).unwrap(),
            "old"
        );
    }

    #[test]
    fn the_layout_file_is_read_bounded_and_checked() {
        let run = tempfile::tempdir().unwrap();
        assert_eq!(layout(run.path()).unwrap(), MemoryLayout::default());
        let path = run.path().join(MEMORY_LAYOUT_FILE);
        fs::write(
            &path,
            r#"{"owner":"Bo","folders":[{"name":"a","about":"x"}]}"#,
        )
        .unwrap();
        assert_eq!(layout(run.path()).unwrap().owner, "Bo");
        fs::write(
            &path,
            r#"{"owner":"Bo","folders":[{"name":"../x","about":"x"}]}"#,
        )
        .unwrap();
        assert!(matches!(
            layout(run.path()),
            Err(VolumeError::Layout { .. })
        ));
        fs::write(&path, vec![b' '; MAX_LAYOUT_BYTES as usize + 1]).unwrap();
        assert!(matches!(
            layout(run.path()),
            Err(VolumeError::Layout { .. })
        ));
    }
}
