//! Assembling the box's root from the disks, then switching onto it.
//!
//! Still in the initramfs (a ramfs/tmpfs root, which `pivot_root` cannot leave):
//! 1. the rootfs, read-only, at `/newroot`;
//! 2. the run directory, a root-only tmpfs at `/run/berth`, filled from the config disk
//!    ([`super::run_dir`]);
//! 3. the volume at `/run/berth/volume` (nosuid, nodev): a root-only place, so only its
//!    binds are reachable: `home/` → `/home/user`, `memory/` → `/memory`,
//!    `agent/` → `/var/lib/berth`, in the new root;
//! 4. the layers at their targets, read-only;
//! 5. `/etc/hosts` and the trust bundle, bound from the run directory over the rootfs's
//!    files;
//! 6. `/dev`, `/proc`, `/sys`, `/run` (with the run directory and the volume in it) and
//!    `/tmp` moved into the new root; the initramfs's own files deleted (its memory is
//!    not otherwise freed); then `chdir /newroot; mount --move . /; chroot .`, as busybox's
//!    `switch_root` does.
//!
//! The rootfs is read-only, so every mount point must already exist in the image:
//! `/proc /sys /dev /run /tmp /home/user /memory /var/lib/berth`, each layer's target, and
//! the files `/etc/hosts` and `/etc/ssl/certs/ca-certificates.crt`. A missing one fails the
//! boot naming it.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use berth_protocol::guest::{AGENT_STATE_DIR, BOX_CA_BUNDLE, BOX_HOME, BOX_MEMORY, BOX_USER_UID};
use berth_protocol::vm::{VmConfig, VOLUME_AGENT_DIR, VOLUME_HOME_DIR, VOLUME_MEMORY_DIR};
use nix::mount::{mount, umount, MsFlags};

use super::plan::{Disk, Plan};
use super::run_dir::{self, RunDirError, CA_FILE, ETC_DIR, HOSTS_FILE};

/// Where the rootfs is assembled inside the initramfs.
pub const NEWROOT: &str = "/newroot";
/// The volume's own mount point, inside the root-only run directory.
pub const VOLUME_DIR: &str = "volume";
/// Moved from the initramfs into the new root, with everything mounted below them.
const MOVED: [&str; 5] = ["/dev", "/proc", "/sys", "/run", "/tmp"];
/// The filesystem of every disk image (ext4 is built into the kernel).
const FSTYPE: &str = "ext4";

#[derive(Debug, thiserror::Error)]
pub enum MountsError {
    #[error("cannot mount {what} {source_path} on {target}")]
    Mount {
        what: String,
        source_path: PathBuf,
        target: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error(
        "the rootfs has no {kind} {path} to mount on (it is read-only: the image must have it)"
    )]
    MissingMountPoint { kind: &'static str, path: PathBuf },
    #[error("cannot prepare {path}")]
    Prepare {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the run directory")]
    RunDir(#[from] RunDirError),
    #[error("no device node for disk {serial}")]
    NoNode { serial: String },
    #[error("cannot set the hostname {hostname:?}")]
    Hostname {
        hostname: String,
        #[source]
        source: nix::Error,
    },
    #[error("cannot switch root: {step}")]
    SwitchRoot {
        step: &'static str,
        #[source]
        source: nix::Error,
    },
}

/// Steps 1–5: everything mounted under [`NEWROOT`], and the run directory written.
pub fn assemble(
    plan: &Plan,
    nodes: &BTreeMap<String, PathBuf>,
    config: &VmConfig,
    run_dir: &Path,
) -> Result<(), MountsError> {
    let newroot = Path::new(NEWROOT);
    prepare_dir(newroot, 0o755)?;
    mount_disk("the rootfs", &plan.root, nodes, newroot, MsFlags::empty())?;

    prepare_dir(run_dir, 0o700)?;
    do_mount(
        "the run directory",
        Path::new("tmpfs"),
        run_dir,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("mode=0700,size=16m"),
    )?;
    run_dir::write(run_dir, config)?;

    let volume = run_dir.join(VOLUME_DIR);
    prepare_dir(&volume, 0o700)?;
    let nosuid = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    mount_disk("the volume", &plan.volume, nodes, &volume, nosuid)?;
    for (dir, uid, mode, target) in [
        (VOLUME_HOME_DIR, BOX_USER_UID, 0o700, BOX_HOME),
        (VOLUME_MEMORY_DIR, BOX_USER_UID, 0o755, BOX_MEMORY),
        (VOLUME_AGENT_DIR, 0, 0o700, AGENT_STATE_DIR),
    ] {
        let source = volume.join(dir);
        ensure_volume_dir(&source, uid, mode)?;
        bind(&source, &in_root(newroot, target), "directory")?;
    }
    // berth-init's journals are data, never programs: noexec, as the sandbox mounts it (a
    // bind takes the volume's nosuid,nodev but not a flag the volume lacks).
    let agent = in_root(newroot, AGENT_STATE_DIR);
    let noexec = MsFlags::MS_REMOUNT
        | MsFlags::MS_BIND
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV
        | MsFlags::MS_NOEXEC;
    do_mount("(noexec)", Path::new("none"), &agent, None, noexec, None)?;

    for layer in &plan.layers {
        let target = in_root(newroot, &layer.target);
        mount_point(&target, "directory")?;
        let what = format!("layer {}", layer.disk.serial);
        mount_disk(&what, &layer.disk, nodes, &target, MsFlags::MS_NODEV)?;
    }

    // Read-only like the rest of the rootfs: the files are the host's word for this boot.
    let etc = run_dir.join(ETC_DIR);
    for (file, target) in [(HOSTS_FILE, "/etc/hosts"), (CA_FILE, BOX_CA_BUNDLE)] {
        let target = in_root(newroot, target);
        bind(&etc.join(file), &target, "file")?;
        let ro = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
        do_mount("(read-only)", Path::new("none"), &target, None, ro, None)?;
    }
    Ok(())
}

/// Sets the hostname from the config (an empty one leaves the kernel's).
pub fn set_hostname(hostname: &str) -> Result<(), MountsError> {
    if hostname.is_empty() {
        return Ok(());
    }
    nix::unistd::sethostname(hostname).map_err(|source| MountsError::Hostname {
        hostname: hostname.to_owned(),
        source,
    })
}

/// Step 6: moves the pseudo filesystems into the new root, frees the initramfs and makes
/// the new root `/`.
pub fn switch_root() -> Result<(), MountsError> {
    let newroot = Path::new(NEWROOT);
    for dir in MOVED {
        let target = in_root(newroot, dir);
        mount_point(&target, "directory")?;
        do_mount(
            "(move)",
            Path::new(dir),
            &target,
            None,
            MsFlags::MS_MOVE,
            None,
        )?;
    }
    free_initramfs();
    let step = |step| move |source| MountsError::SwitchRoot { step, source };
    nix::unistd::chdir(newroot).map_err(step("chdir /newroot"))?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(step("mount --move . /"))?;
    nix::unistd::chroot(".").map_err(step("chroot ."))?;
    nix::unistd::chdir("/").map_err(step("chdir /"))?;
    Ok(())
}

/// Unmounts the volume (its binds first) after everything is stopped and synced; if it is
/// still busy, remounts it read-only, which also leaves ext4 clean. Best effort: the
/// VM powers off next either way, and the journal covers the rest.
pub fn release_volume(run_dir: &Path) {
    // A bind still busy (the harness journals stay open to the end) is fine: the remount
    // below covers it, being of the same filesystem.
    for bind in [AGENT_STATE_DIR, BOX_MEMORY, BOX_HOME] {
        let _ = umount(bind);
    }
    let volume = run_dir.join(VOLUME_DIR);
    if umount(&volume).is_ok() {
        return;
    }
    let ro = MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    if let Err(err) = mount(None::<&str>, &volume, None::<&str>, ro, None::<&str>) {
        eprintln!(
            "berth-init: cannot unmount or remount read-only {}: {err}",
            volume.display()
        );
    }
}

/// Deletes the initramfs's files (they live in RAM until deleted), staying on its own
/// filesystem: mount points (the new root, the moved directories) are never entered.
/// Runs only when `/` is still the initramfs; a failure just leaves memory in use.
fn free_initramfs() {
    let Ok(root) = std::fs::symlink_metadata("/") else {
        return;
    };
    if !crate::boot::root_is_initramfs() {
        return;
    }
    remove_tree_on_dev(Path::new("/"), root.dev());
}

fn remove_tree_on_dev(dir: &Path, dev: u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.dev() != dev {
            continue;
        }
        if meta.is_dir() {
            remove_tree_on_dev(&path, dev);
            let _ = std::fs::remove_dir(&path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// `target` (absolute) inside `root`.
fn in_root(root: &Path, target: &str) -> PathBuf {
    root.join(target.trim_start_matches('/'))
}

fn prepare_dir(path: &Path, mode: u32) -> Result<(), MountsError> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(path)
    {
        Ok(()) => Ok(()),
        Err(source) => Err(MountsError::Prepare {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Makes a top-level directory of the volume on its first boot (the image builder makes
/// them too; this covers an older or hand-made volume). An existing one is left alone.
fn ensure_volume_dir(path: &Path, uid: u32, mode: u32) -> Result<(), MountsError> {
    let err = |source| MountsError::Prepare {
        path: path.to_owned(),
        source,
    };
    match std::fs::DirBuilder::new().mode(mode).create(path) {
        Ok(()) if nix::unistd::geteuid().is_root() => {
            std::os::unix::fs::chown(path, Some(uid), Some(uid)).map_err(err)
        }
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(err(e)),
    }
}

/// Checks that a mount point exists in the (read-only) rootfs.
fn mount_point(path: &Path, kind: &'static str) -> Result<(), MountsError> {
    let ok = match std::fs::metadata(path) {
        Ok(meta) if kind == "directory" => meta.is_dir(),
        Ok(meta) => meta.is_file(),
        Err(_) => false,
    };
    if ok {
        Ok(())
    } else {
        Err(MountsError::MissingMountPoint {
            kind,
            path: path.to_owned(),
        })
    }
}

fn mount_disk(
    what: &str,
    disk: &Disk,
    nodes: &BTreeMap<String, PathBuf>,
    target: &Path,
    mut flags: MsFlags,
) -> Result<(), MountsError> {
    let node = nodes.get(&disk.serial).ok_or_else(|| MountsError::NoNode {
        serial: disk.serial.clone(),
    })?;
    if disk.ro {
        flags |= MsFlags::MS_RDONLY;
    }
    do_mount(what, node, target, Some(FSTYPE), flags, None)
}

fn bind(source: &Path, target: &Path, kind: &'static str) -> Result<(), MountsError> {
    mount_point(target, kind)?;
    do_mount("(bind)", source, target, None, MsFlags::MS_BIND, None)
}

fn do_mount(
    what: &str,
    source: &Path,
    target: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<(), MountsError> {
    mount(Some(source), target, fstype, flags, data).map_err(|err| MountsError::Mount {
        what: what.to_owned(),
        source_path: source.to_owned(),
        target: target.to_owned(),
        source: err,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_land_inside_the_new_root() {
        assert_eq!(
            in_root(Path::new("/newroot"), "/etc/hosts"),
            Path::new("/newroot/etc/hosts")
        );
        assert_eq!(in_root(Path::new("/newroot"), "/"), Path::new("/newroot/"));
    }

    #[test]
    fn a_missing_mount_point_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hosts"), "").unwrap();
        assert!(mount_point(&dir.path().join("hosts"), "file").is_ok());
        assert!(mount_point(dir.path(), "directory").is_ok());
        let err = mount_point(&dir.path().join("hosts"), "directory").unwrap_err();
        assert!(err.to_string().contains("no directory"), "{err}");
        let err = mount_point(&dir.path().join("absent"), "file").unwrap_err();
        assert!(err.to_string().contains("absent"), "{err}");
    }

    #[test]
    fn volume_dirs_are_made_once_with_their_owner() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        ensure_volume_dir(&home, BOX_USER_UID, 0o700).unwrap();
        let meta = std::fs::metadata(&home).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700);
        if nix::unistd::geteuid().is_root() {
            assert_eq!(meta.uid(), BOX_USER_UID);
        }
        std::fs::write(home.join("keep"), "x").unwrap();
        ensure_volume_dir(&home, BOX_USER_UID, 0o700).unwrap();
        assert!(home.join("keep").exists());
    }
}
