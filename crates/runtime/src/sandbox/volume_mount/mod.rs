//! A sandbox box's volume: the same sparse ext4 image a VM boots with
//! (`<box>/volume.ext4`, made and grown by `berth_image`), loop-mounted idmapped at
//! `<box>/mnt` for the length of a boot. The bundle binds its `home/`, `memory/` and
//! `agent/` into the box, so a box can stop on one runtime and start on another.
//!
//! Each start: migrate an old directory volume once (`migrate.rs`), check in full an image
//! a VM's guest may have written (`crate::volume_image`), create or grow the image,
//! `e2fsck -p` it (a crash leaves it unclean; both checks run confined), bind a loop
//! device, mount (`errors=remount-ro,nosuid,nodev` whatever the superblock says). Each stop
//! (and every failed start): unmount, which frees the loop device (autoclear). A daemon
//! that died with boxes mounted leaves mounts and devices that [`reconcile`] finds again.

use std::collections::HashSet;
use std::os::unix::fs::chown;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_image::{FsckOutcome, ImageError, VolumeChange, VolumeStock};
use berth_protocol::guest::BOX_USER_UID;

use super::idmap_mount::{
    is_mounted, mount_idmapped, mount_points, unmount, user_namespace, Access,
};
use super::loop_device::{attach, bound_devices, detach, devices_of, refresh_capacity};
use super::paths::{BoxPaths, Layout};
use super::phases::PhaseClock;
use super::volume_error::VolumeError;
use crate::IdMap;

use super::paths::{VOLUME_IMAGE_NAME as IMAGE_NAME, VOLUME_MOUNT_NAME as MOUNT_NAME};

/// Puts the box's volume in place for a start (blocking): see the module doc. On error
/// nothing stays mounted or bound. Laps `volume_check` (release, migrate, checks, create
/// or grow, `e2fsck`), `loop_attach` and `idmap_mount` on `clock`.
pub fn mount(
    paths: &BoxPaths,
    id_map: IdMap,
    disk_mib: u64,
    volumes: &VolumeStock,
    clock: &mut PhaseClock,
) -> Result<(), VolumeError> {
    let image = paths.volume_image();
    let target = paths.volume_mount();
    // What an earlier boot left (the box is not running: start checked).
    release(paths)?;
    // Never two mounts of one image (a lingering user of the last boot's device).
    if let Some(&device) = loop_devices_of(paths).first() {
        return Err(VolumeError::StillAttached {
            image: paths.volume_image(),
            device,
        });
    }
    super::migrate::migrate_if_needed(paths, id_map, disk_mib)?;
    // A VM's guest may have written it: checked in full (confined, read-only) before the
    // host grows, checks or mounts it; refused, it is left as it was.
    crate::volume_image::check_if_guest_written(&image).map_err(|source| match source {
        ImageError::VolumeRefused { .. } => VolumeError::GuestWrittenRefused {
            image: image.clone(),
            source,
        },
        source => VolumeError::Image {
            action: "check the guest-written volume",
            image: image.clone(),
            source,
        },
    })?;
    // A directory volume may have held more than `disk_mib` (nothing bounded it): its image
    // is as large as it had to be, and is kept so, not refused as a shrink.
    let current_mib = std::fs::metadata(&image).map_or(0, |m| m.len() >> 20);
    if current_mib > disk_mib {
        tracing::warn!(image = %image.display(), current_mib, disk_mib, "the volume is larger than the box's disk size (migrated from a fuller directory): kept at its size");
    }
    let disk_mib = disk_mib.max(current_mib);
    let change = volumes
        .ensure_volume(&image, disk_mib)
        .map_err(|source| VolumeError::Image {
            action: "create or grow the volume",
            image: image.clone(),
            source,
        })?;
    match change {
        VolumeChange::Unchanged => {}
        VolumeChange::Created => {
            tracing::info!(image = %image.display(), disk_mib, "box volume created")
        }
        VolumeChange::Grown { from_mib } => {
            tracing::info!(image = %image.display(), from_mib, disk_mib, "box volume grown")
        }
    }
    // Host root's alone: the box dir is traversable by the box's ids.
    std::fs::set_permissions(&image, std::os::unix::fs::PermissionsExt::from_mode(0o600)).map_err(
        |source| VolumeError::Io {
            action: "chmod",
            path: image.clone(),
            source,
        },
    )?;
    check(&image)?;
    make_mount_point(&target)?;
    clock.lap("volume_check");
    let userns = user_namespace(id_map)?;
    let device = attach(&image)?;
    clock.lap("loop_attach");
    let access = Access::ReadWrite {
        reserved_for: id_map.host_id(0),
    };
    mount_idmapped(&device.path(), &target, &userns, access)?;
    tracing::debug!(image = %image.display(), device = device.number(), "box volume mounted");
    // The mount holds the device now; closing this handle lets it autoclear at unmount.
    drop(device);
    if let Err(e) = ensure_dirs(paths, id_map) {
        let _ = release(paths);
        return Err(e);
    }
    clock.lap("idmap_mount");
    Ok(())
}

/// Unmounts the box's volume and unbinds the loop devices still bound to its image, then
/// waits (at most [`RELEASE_WAIT`]) for them to go: a box's mount namespace may hold the
/// file system for a moment after its container is deleted, and a device in use is only
/// marked to clear on its last close. Nothing mounted: fine. A device still bound after
/// the wait is logged; the next [`mount`] refuses to mount the image twice.
pub fn release(paths: &BoxPaths) -> Result<(), VolumeError> {
    unmount(&canonical(&paths.volume_mount()))?;
    for number in loop_devices_of(paths) {
        detach(number)?;
    }
    if !wait_released(paths, RELEASE_WAIT) {
        tracing::warn!(image = %paths.volume_image().display(), devices = ?loop_devices_of(paths), "the volume's loop device is still in use after the unmount; it frees itself with its last user");
    }
    Ok(())
}

/// How long [`release`] waits for the box's loop devices to free themselves.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// Waits until no loop device is bound to the box's image, at most `timeout`.
fn wait_released(paths: &BoxPaths, timeout: Duration) -> bool {
    let started = Instant::now();
    let mut backoff = Duration::from_millis(1);
    loop {
        if loop_devices_of(paths).is_empty() {
            return true;
        }
        if started.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_millis(50));
    }
}

/// The loop devices bound to the box's image.
pub fn loop_devices_of(paths: &BoxPaths) -> Vec<u32> {
    devices_of(&canonical(&paths.volume_image()))
}

/// Whether the box's volume is mounted on the host now.
pub fn is_volume_mounted(paths: &BoxPaths) -> bool {
    is_mounted(&canonical(&paths.volume_mount()))
}

/// Releases the volume mounts and loop devices of this data dir's boxes that are not in
/// `alive` (box ids with a container): what a daemon killed with boxes up left behind.
/// Returns the ids whose volume was released; failures are logged and skipped.
pub fn reconcile(layout: &Layout, alive: &HashSet<String>) -> Vec<String> {
    let boxes = canonical(&layout.boxes_dir());
    let box_of = |path: &Path, name: &str| -> Option<String> {
        if path.file_name()? != name {
            return None;
        }
        let dir = path.parent()?;
        (dir.parent()? == boxes).then(|| dir.file_name()?.to_str().map(String::from))?
    };
    let mut ids: Vec<String> = mount_points()
        .iter()
        .filter_map(|p| box_of(p, MOUNT_NAME))
        .chain(
            bound_devices()
                .iter()
                .filter_map(|(_, b)| box_of(b, IMAGE_NAME)),
        )
        .filter(|id| !alive.contains(id))
        .collect();
    ids.sort();
    ids.dedup();
    let mut released = Vec::new();
    for id in ids {
        let paths = BoxPaths::at(boxes.join(&id));
        match release(&paths) {
            Ok(()) => {
                tracing::info!(box_id = %id, "released the volume mount and loop device an earlier daemon left");
                released.push(id);
            }
            Err(e) => {
                tracing::warn!(box_id = %id, error = %crate::error_chain(&e), "cannot release a leftover volume")
            }
        }
    }
    released
}

/// Grows the mounted volume of a running box to `disk_mib`, online: the image file, then
/// the loop device's capacity, then the kernel's online resize of the mounted ext4. Never shrinks (an error);
/// the same size does nothing.
pub fn grow_online(paths: &BoxPaths, disk_mib: u64) -> Result<(), VolumeError> {
    let image = paths.volume_image();
    let current = std::fs::metadata(&image)
        .map_err(|source| VolumeError::Io {
            action: "stat",
            path: image.clone(),
            source,
        })?
        .len();
    let wanted = disk_mib.saturating_mul(1 << 20);
    if wanted < current {
        return Err(VolumeError::Image {
            action: "grow",
            image: image.clone(),
            source: ImageError::Shrink {
                path: image,
                current_mib: current >> 20,
                requested_mib: disk_mib,
            },
        });
    }
    if wanted == current {
        return Ok(());
    }
    let devices = loop_devices_of(paths);
    let (true, [device]) = (is_volume_mounted(paths), devices.as_slice()) else {
        return Err(VolumeError::NotMounted { image });
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&image)
        .map_err(|source| VolumeError::Io {
            action: "open",
            path: image.clone(),
            source,
        })?;
    file.set_len(wanted).map_err(|source| VolumeError::Io {
        action: "grow",
        path: image.clone(),
        source,
    })?;
    refresh_capacity(*device)?;
    if let Err(source) = berth_image::grow_mounted_volume(&paths.volume_mount(), wanted) {
        // Back to the file system's size: an image larger than its file system would look
        // grown already to the next start's offline growth.
        let _ = file.set_len(current);
        let _ = refresh_capacity(*device);
        return Err(VolumeError::Image {
            action: "grow (online) the file system in",
            image,
            source,
        });
    }
    tracing::info!(image = %image.display(), from_mib = current >> 20, disk_mib, "box volume grown online");
    Ok(())
}

/// `e2fsck -p` before every mount: after a clean stop it only looks; after a crash it
/// replays the journal and repairs what is safe, and says so in the log.
fn check(image: &Path) -> Result<(), VolumeError> {
    match berth_image::check_volume(image) {
        Ok(FsckOutcome::Clean) => Ok(()),
        Ok(FsckOutcome::Repaired { report }) => {
            tracing::warn!(image = %image.display(), %report, "e2fsck repaired the box volume (it was not cleanly unmounted)");
            Ok(())
        }
        Err(source @ ImageError::ToolFailed { .. }) => Err(VolumeError::Unrepairable {
            image: image.into(),
            source,
        }),
        Err(source) => Err(VolumeError::Image {
            action: "check the volume",
            image: image.into(),
            source,
        }),
    }
}

/// Root's, 0755: once mounted, the volume's own root (0755, the box root's) covers it.
fn make_mount_point(target: &Path) -> Result<(), VolumeError> {
    match std::fs::create_dir(target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(source) => {
            return Err(VolumeError::Io {
                action: "create the volume mount point",
                path: target.into(),
                source,
            })
        }
    }
    Ok(())
}

/// `home/`, `memory/` and `agent/` with their owners and modes when the image lacks one
/// (berth-init does the same in a VM). Made through the idmapped mount as the box's root:
/// host root's own ids do not map into it, and the disk gets 0 and 1001.
fn ensure_dirs(paths: &BoxPaths, id_map: IdMap) -> Result<(), VolumeError> {
    for (dir, uid, mode) in [
        (paths.home(), BOX_USER_UID, 0o700),
        (paths.memory(), BOX_USER_UID, 0o755),
        (paths.agent_state(), 0, 0o700),
    ] {
        let io = |action| {
            let dir = dir.clone();
            move |source| VolumeError::Io {
                action,
                path: dir,
                source,
            }
        };
        match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => {
                return Err(io("use (not a directory)")(
                    std::io::ErrorKind::InvalidData.into(),
                ))
            }
            Err(_) => {}
        }
        let host = id_map.host_id(uid);
        as_fs_ids(id_map.host_id(0), || std::fs::create_dir(&dir))
            .map_err(io("create the directory"))?;
        chown(&dir, Some(host), Some(host)).map_err(io("chown"))?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .map_err(io("chmod"))?;
    }
    Ok(())
}

/// Runs `f` with this thread's file system uid and gid set to `id` (per thread: other
/// threads keep root's), then back to root.
pub(crate) fn as_fs_ids<T>(id: u32, f: impl FnOnce() -> T) -> T {
    // SAFETY: setfsuid/setfsgid change only this thread's file system ids; they take and
    // return integers.
    unsafe {
        libc::setfsgid(id);
        libc::setfsuid(id);
    }
    let out = f();
    // SAFETY: as above, back to root (the daemon runs as root).
    unsafe {
        libc::setfsuid(0);
        libc::setfsgid(0);
    }
    out
}

/// `path` with its directory resolved (how sysfs and mountinfo print it); `path` itself
/// when that fails.
pub(crate) fn canonical(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .map(|d| d.join(name))
            .unwrap_or_else(|_| path.to_path_buf()),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests;
