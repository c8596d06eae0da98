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

use berth_image::{FsckOutcome, ImageError, VolumeChange};
use berth_protocol::guest::BOX_USER_UID;

use super::idmap_mount::{
    is_mounted, mount_idmapped, mount_points, unmount, user_namespace, Access,
};
use super::loop_device::{attach, bound_devices, detach, devices_of, refresh_capacity};
use super::paths::{BoxPaths, Layout};
use super::volume_error::VolumeError;
use crate::IdMap;

use super::paths::{VOLUME_IMAGE_NAME as IMAGE_NAME, VOLUME_MOUNT_NAME as MOUNT_NAME};

/// Puts the box's volume in place for a start (blocking): see the module doc. On error
/// nothing stays mounted or bound.
pub fn mount(paths: &BoxPaths, id_map: IdMap, disk_mib: u64) -> Result<(), VolumeError> {
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
    let change =
        berth_image::ensure_volume(&image, disk_mib).map_err(|source| VolumeError::Image {
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
    let userns = user_namespace(id_map)?;
    let device = attach(&image)?;
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
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// Releases the box's volume and whatever else a test mounted, also when it panics.
    struct Guard(BoxPaths, Vec<PathBuf>);
    impl Drop for Guard {
        fn drop(&mut self) {
            for p in &self.1 {
                let _ = unmount(p);
            }
            let _ = release(&self.0);
        }
    }

    fn skip() -> bool {
        let skip = !nix::unistd::geteuid().is_root() || !Path::new("/dev/loop-control").exists();
        if skip {
            berth_testkit::skip("loop", "volume mounts need root and loop devices");
        }
        skip
    }

    /// On disk the volume holds 0 and 1001; through the mount, and through a bind of a
    /// subdirectory of it (what the OCI runtime makes), the box's host range.
    #[test]
    fn the_mount_and_its_binds_shift_ids_and_release_frees_everything() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = BoxPaths::at(dir.path().join("bx"));
        std::fs::create_dir_all(paths.dir()).unwrap();
        let map = IdMap::for_slot(21).unwrap();
        let bind = dir.path().join("bind");
        std::fs::create_dir(&bind).unwrap();
        let _guard = Guard(paths.clone(), vec![bind.clone()]);
        mount(&paths, map, 32).unwrap();
        assert!(is_volume_mounted(&paths));
        assert_eq!(loop_devices_of(&paths).len(), 1);
        let image = std::fs::metadata(paths.volume_image()).unwrap();
        assert_eq!((image.uid(), image.mode() & 0o777), (0, 0o600));
        let home = std::fs::metadata(paths.home()).unwrap();
        assert_eq!(
            (home.uid(), home.gid()),
            (map.host_id(1001), map.host_id(1001))
        );
        let agent = std::fs::metadata(paths.agent_state()).unwrap();
        assert_eq!((agent.uid(), agent.mode() & 0o777), (map.host_id(0), 0o700));
        assert!(paths.memory().join("README.md").is_file());

        nix::mount::mount(
            Some(&paths.home()),
            &bind,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        let file = bind.join("through-bind");
        // Host root's own id maps to nothing on the volume; the box user's does.
        assert!(std::fs::write(dir.path().join("bind/as-host-root"), "x").is_err());
        as_fs_ids(map.host_id(1001), || std::fs::write(&file, "x")).unwrap();
        assert_eq!(std::fs::metadata(&file).unwrap().uid(), map.host_id(1001));
        // A lost agent/ is made again, root-only.
        std::fs::remove_dir(paths.agent_state()).unwrap();
        ensure_dirs(&paths, map).unwrap();
        let agent = std::fs::metadata(paths.agent_state()).unwrap();
        assert_eq!((agent.uid(), agent.mode() & 0o777), (map.host_id(0), 0o700));
        // An id outside the box's range cannot be written through the mount.
        assert!(std::os::unix::fs::chown(&file, Some(4242), None).is_err());
        unmount(&bind).unwrap();
        release(&paths).unwrap();
        assert!(!is_volume_mounted(&paths));
        assert!(loop_devices_of(&paths).is_empty());
        // What a warm start spends on the volume (e2fsck, loop device, idmapped mount).
        let t0 = Instant::now();
        mount(&paths, map, 32).unwrap();
        eprintln!("warm volume mount: {:?}", t0.elapsed());
        let t0 = Instant::now();
        release(&paths).unwrap();
        eprintln!("volume release: {:?}", t0.elapsed());

        // The disk itself: 1001, as a VM sees it.
        let out = std::process::Command::new("debugfs")
            .args(["-R", "stat /home/through-bind"])
            .arg(paths.volume_image())
            .output()
            .unwrap();
        let stat = String::from_utf8_lossy(&out.stdout);
        assert!(stat.contains("User:  1001"), "{stat}");
    }

    /// The box user fills the volume; box root (berth-init) still writes in ext4's
    /// reserve, as root does in a VM.
    #[test]
    fn box_root_writes_in_the_reserve_of_a_volume_its_user_filled() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = BoxPaths::at(dir.path().join("bx"));
        std::fs::create_dir_all(paths.dir()).unwrap();
        let map = IdMap::for_slot(24).unwrap();
        let _guard = Guard(paths.clone(), vec![]);
        mount(&paths, map, 32).unwrap();
        let fill = paths.home().join("fill");
        let err = as_fs_ids(map.host_id(1001), || -> std::io::Result<()> {
            use std::io::Write;
            let mut file = std::fs::File::create(&fill)?;
            let block = vec![1u8; 64 << 10];
            loop {
                file.write_all(&block)?;
                file.sync_data()?;
            }
        })
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
        let journal = paths.agent_state().join("journal");
        as_fs_ids(map.host_id(0), || -> std::io::Result<()> {
            use std::io::Write;
            let mut file = std::fs::File::create(&journal)?;
            file.write_all(&vec![2u8; 128 << 10])?;
            file.sync_data()
        })
        .expect("box root writes in the reserve");
    }

    #[test]
    fn a_leftover_mount_is_released_by_reconcile_unless_its_box_runs() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let id = berth_protocol::BoxId::from_random([9; 20]);
        let paths = layout.box_paths(&id);
        std::fs::create_dir_all(paths.dir()).unwrap();
        let _guard = Guard(paths.clone(), vec![]);
        mount(&paths, IdMap::for_slot(22).unwrap(), 32).unwrap();
        let alive: HashSet<String> = [id.to_string()].into();
        assert!(reconcile(&layout, &alive).is_empty());
        assert!(is_volume_mounted(&paths));
        assert_eq!(reconcile(&layout, &HashSet::new()), vec![id.to_string()]);
        assert!(!is_volume_mounted(&paths));
        assert!(loop_devices_of(&paths).is_empty());
    }

    /// An image as a crash leaves it (taken while mounted: the journal needs recovery) is
    /// repaired by the next mount's check, which says so, and mounts with the files.
    #[test]
    fn an_image_left_by_a_crash_is_repaired_and_mounts() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let live = BoxPaths::at(dir.path().join("live"));
        let crashed = BoxPaths::at(dir.path().join("crashed"));
        for p in [&live, &crashed] {
            std::fs::create_dir_all(p.dir()).unwrap();
        }
        let map = IdMap::for_slot(25).unwrap();
        let _guards = (Guard(live.clone(), vec![]), Guard(crashed.clone(), vec![]));
        mount(&live, map, 32).unwrap();
        as_fs_ids(map.host_id(1001), || {
            std::fs::write(live.home().join("synced"), "fsync'd\n")?;
            std::fs::File::open(live.home().join("synced"))?.sync_all()
        })
        .unwrap();
        // SAFETY: sync takes no arguments.
        unsafe { libc::sync() };
        std::fs::copy(live.volume_image(), crashed.volume_image()).unwrap();
        release(&live).unwrap();
        let first = berth_image::check_volume(&crashed.volume_image());
        assert!(
            matches!(first, Ok(FsckOutcome::Repaired { .. })),
            "{first:?}"
        );
        // Now clean: the start's check only looks.
        assert_eq!(
            berth_image::check_volume(&crashed.volume_image()).unwrap(),
            FsckOutcome::Clean
        );
        mount(&crashed, map, 32).unwrap();
        assert_eq!(
            std::fs::read_to_string(crashed.home().join("synced")).unwrap(),
            "fsync'd\n"
        );
    }

    /// A box from before volume images starts on an image made from its directory.
    #[test]
    fn a_start_migrates_a_directory_volume() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = BoxPaths::at(dir.path().join("bx"));
        let map = IdMap::for_slot(26).unwrap();
        let user = map.host_id(BOX_USER_UID);
        let home = paths.legacy_volume_dir().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join("old.txt"), "from the directory\n").unwrap();
        for p in [&home, &home.join("old.txt")] {
            chown(p, Some(user), Some(user)).unwrap();
        }
        let _guard = Guard(paths.clone(), vec![]);
        mount(&paths, map, 32).unwrap();
        assert!(!paths.legacy_volume_dir().exists());
        let old = paths.home().join("old.txt");
        assert_eq!(
            std::fs::read_to_string(&old).unwrap(),
            "from the directory\n"
        );
        assert_eq!(std::fs::metadata(&old).unwrap().uid(), user);
        // The directory had no memory/ or agent/: made as a fresh volume has them.
        let agent = std::fs::metadata(paths.agent_state()).unwrap();
        assert_eq!((agent.uid(), agent.mode() & 0o777), (map.host_id(0), 0o700));
        assert_eq!(std::fs::metadata(paths.memory()).unwrap().uid(), user);
    }

    #[test]
    fn an_unrepairable_image_fails_the_mount_naming_the_fix() {
        if skip() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let paths = BoxPaths::at(dir.path().join("bx"));
        std::fs::create_dir_all(paths.dir()).unwrap();
        let _guard = Guard(paths.clone(), vec![]);
        // Not an ext4 at all (a zeroed superblock).
        std::fs::File::create(paths.volume_image())
            .unwrap()
            .set_len(32 << 20)
            .unwrap();
        let err = mount(&paths, IdMap::for_slot(23).unwrap(), 32).unwrap_err();
        assert!(matches!(err, VolumeError::Unrepairable { .. }), "{err}");
        assert!(err.to_string().contains("e2fsck -f"), "{err}");
        assert!(!is_volume_mounted(&paths));
        assert!(loop_devices_of(&paths).is_empty());
    }
}
