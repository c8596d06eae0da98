//! Layer mount points in a read-only rootfs image.
//!
//! In a VM, berth-init mounts each layer on a directory of the read-only rootfs and cannot
//! create one there (the sandbox makes them in its host-side skeleton). So a box whose
//! layers aim at directories its image lacks boots a copy of the image with them added:
//! content-addressed by the image and the targets, made once and shared by every box
//! asking the same. A target whose parent in the image is not a directory (Debian's
//! `/lib` is a symlink) is refused before any boot, with the reason.

use std::path::{Path, PathBuf};

use crate::error::io;
use crate::ext4::debugfs_write;
use crate::key::KeyBuilder;
use crate::tool::{Tool, DEBUGFS};
use crate::{ImageError, ImageStore};

const CP: Tool = Tool {
    name: "cp",
    package: "coreutils",
};

/// What a path is in an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Missing,
    Directory,
    /// Anything else: debugfs's name for it (`symlink`, `regular`, …).
    Other(&'static str),
}

/// `image` if every target is a directory in it; else the image with the missing
/// directories added (mode 0755, owned by root), built on first use. Targets are
/// absolute, normalised paths (`berth_runtime::layer::check_target` checks them).
///
/// Called at every start of a box with layers: the answer for an image and a set of targets
/// is kept in the store (the copy, or a marker saying the image needs none), so only the
/// first start looks into the image (a `debugfs` run per path component).
pub fn with_mount_points(
    store: &ImageStore,
    image: &Path,
    targets: &[String],
) -> Result<PathBuf, ImageError> {
    if targets.is_empty() {
        return Ok(image.to_path_buf());
    }
    let name = image
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut targets = targets.to_vec();
    targets.sort();
    targets.dedup();
    // The image's name is its own content key (every rootfs image comes from the store).
    let mut key = KeyBuilder::new("rootfs-mount-points").field("image", &name);
    for target in &targets {
        key = key.field("target", target);
    }
    let out = store.rootfs_path(&key.finish());
    let unchanged = out.with_extension("unchanged");
    if out.exists() {
        return Ok(out);
    }
    if unchanged.exists() {
        return Ok(image.to_path_buf());
    }
    let missing = missing_dirs(image, &targets)?;
    if missing.is_empty() {
        let dir = unchanged.parent().expect("a store path has a parent");
        std::fs::create_dir_all(dir).map_err(io("create the directory", dir))?;
        std::fs::write(&unchanged, b"").map_err(io("write", &unchanged))?;
        return Ok(image.to_path_buf());
    }
    let dir = out.parent().expect("a store path has a parent");
    std::fs::create_dir_all(dir).map_err(io("create the directory", dir))?;
    let tmp = out.with_extension("tmp");
    let mut cp = CP.command()?;
    cp.arg("--sparse=always").arg(image).arg(&tmp);
    CP.run(&mut cp)?;
    let mut commands = String::new();
    for d in &missing {
        commands.push_str(&format!(
            "mkdir {d}\nsif {d} mode 040755\nsif {d} uid 0\nsif {d} gid 0\n"
        ));
    }
    if let Err(e) = debugfs_write(&tmp, &commands) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, &out).map_err(io("move into place", &out))?;
    Ok(out)
}

/// The directories to add so every target exists, parents first, each once. Errors when a
/// target or one of its parents is something other than a directory.
fn missing_dirs(image: &Path, targets: &[String]) -> Result<Vec<String>, ImageError> {
    let mut missing: Vec<String> = Vec::new();
    for target in targets {
        let mut path = String::new();
        for part in target.split('/').filter(|p| !p.is_empty()) {
            path.push('/');
            path.push_str(part);
            if missing.contains(&path) {
                continue;
            }
            match entry(image, &path)? {
                Entry::Directory => {}
                Entry::Missing => missing.push(path.clone()),
                Entry::Other(kind) => {
                    return Err(ImageError::MountPointBlocked {
                        target: target.clone(),
                        path,
                        kind,
                    })
                }
            }
        }
    }
    Ok(missing)
}

/// What `path` is in `image`, from `debugfs -R "stat …"` (read-only).
fn entry(image: &Path, path: &str) -> Result<Entry, ImageError> {
    // A path with a space or quote would split debugfs's command line: targets never hold
    // one (check_target), but refuse rather than guess.
    if path.contains(|c: char| c.is_whitespace() || c == '"') {
        return Err(ImageError::Invalid {
            what: "mount point",
            value: path.into(),
            why: "no spaces or quotes",
        });
    }
    let mut cmd = DEBUGFS.command()?;
    cmd.arg("-R").arg(format!("stat {path}")).arg(image);
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(io("run debugfs on", image))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("File not found") {
        return Ok(Entry::Missing);
    }
    let kind = stdout
        .split_once("Type: ")
        .and_then(|(_, rest)| rest.split_whitespace().next());
    match kind {
        Some("directory") => Ok(Entry::Directory),
        Some("symlink") => Ok(Entry::Other("symlink")),
        Some("regular") => Ok(Entry::Other("file")),
        Some(_) => Ok(Entry::Other("special file")),
        None => Err(ImageError::ToolFailed {
            command: crate::tool::describe(&cmd),
            status: out.status,
            stderr: stderr.trim().to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ext4::{make, Journal};

    fn image_of(dir: &Path, out: &Path) {
        make(dir, out, "berth-root", None, Journal::No).unwrap();
    }

    #[test]
    fn adds_missing_dirs_once_and_refuses_a_target_under_a_symlink() {
        if DEBUGFS.locate().is_err() {
            berth_testkit::skip(
                "e2fsprogs",
                "debugfs is not installed (apt-get install e2fsprogs)",
            );
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("tree");
        std::fs::create_dir_all(tree.join("opt/present")).unwrap();
        std::fs::create_dir_all(tree.join("usr/lib")).unwrap();
        std::os::unix::fs::symlink("usr/lib", tree.join("lib")).unwrap();
        std::fs::write(tree.join("file"), b"x").unwrap();
        let image = tmp.path().join("base.ext4");
        image_of(&tree, &image);
        let store = ImageStore::new(tmp.path());

        // Present already: the image itself.
        let same = with_mount_points(&store, &image, &["/opt/present".into()]).unwrap();
        assert_eq!(same, image);

        let targets = vec!["/opt/skills/a".to_string(), "/srv/harness".to_string()];
        let made = with_mount_points(&store, &image, &targets).unwrap();
        assert_ne!(made, image);
        for dir in [
            "/opt/skills",
            "/opt/skills/a",
            "/srv",
            "/srv/harness",
            "/opt/present",
        ] {
            assert_eq!(entry(&made, dir).unwrap(), Entry::Directory, "{dir}");
        }
        assert_eq!(
            entry(&image, "/srv").unwrap(),
            Entry::Missing,
            "the base is untouched"
        );
        let mtime = std::fs::metadata(&made).unwrap().modified().unwrap();
        let again = with_mount_points(&store, &image, &targets).unwrap();
        assert_eq!(again, made);
        assert_eq!(
            std::fs::metadata(&again).unwrap().modified().unwrap(),
            mtime
        );

        for (target, kind) in [("/lib/skills", "symlink"), ("/file/x", "file")] {
            let err = with_mount_points(&store, &image, &[target.into()]).unwrap_err();
            match &err {
                ImageError::MountPointBlocked { kind: k, .. } => assert_eq!(*k, kind),
                other => panic!("{target}: {other}"),
            }
            assert!(err.to_string().contains(target), "{err}");
        }
    }
}
