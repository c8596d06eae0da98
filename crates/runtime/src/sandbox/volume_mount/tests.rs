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

/// [`super::mount`] with a volume stock of its own beside the box dir.
fn mount(
    paths: &BoxPaths,
    map: IdMap,
    disk_mib: u64,
    clock: &mut PhaseClock,
) -> Result<(), VolumeError> {
    let stock = VolumeStock::open(&paths.dir().with_extension("stock")).unwrap();
    super::mount(paths, map, disk_mib, &stock, clock)
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
    let mut clock = PhaseClock::start();
    mount(&paths, map, 32, &mut clock).unwrap();
    assert!(is_volume_mounted(&paths));
    let laps: Vec<_> = clock.finish().0.into_iter().map(|p| p.name).collect();
    assert_eq!(laps, ["volume_check", "loop_attach", "idmap_mount"]);
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
    assert!(paths.memory().is_dir());

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
    mount(&paths, map, 32, &mut PhaseClock::start()).unwrap();
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
    mount(&paths, map, 32, &mut PhaseClock::start()).unwrap();
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
    mount(
        &paths,
        IdMap::for_slot(22).unwrap(),
        32,
        &mut PhaseClock::start(),
    )
    .unwrap();
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
    mount(&live, map, 32, &mut PhaseClock::start()).unwrap();
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
    mount(&crashed, map, 32, &mut PhaseClock::start()).unwrap();
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
    mount(&paths, map, 32, &mut PhaseClock::start()).unwrap();
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
    let err = mount(
        &paths,
        IdMap::for_slot(23).unwrap(),
        32,
        &mut PhaseClock::start(),
    )
    .unwrap_err();
    assert!(matches!(err, VolumeError::Unrepairable { .. }), "{err}");
    assert!(err.to_string().contains("e2fsck -f"), "{err}");
    assert!(!is_volume_mounted(&paths));
    assert!(loop_devices_of(&paths).is_empty());
}
