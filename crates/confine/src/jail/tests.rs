use super::*;
use crate::caps;
use crate::test_fork::{in_child, is_root};
use crate::PrivilegeDrop;

fn binds(prepared: &PreparedJail, root: &str) -> Vec<(String, String)> {
    prepared
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Bind { source, target, .. } => Some((
                source.to_str().unwrap().to_owned(),
                target
                    .to_str()
                    .unwrap()
                    .strip_prefix(root)
                    .unwrap()
                    .to_owned(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn steps_make_each_parent_once_bind_at_the_host_path_and_skip_what_usr_holds() {
    let dir = tempfile::tempdir().unwrap();
    let volume = dir.path().join("box/volume.ext4");
    let run = dir.path().join("box/vm/run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(&volume, "").unwrap();
    let mut jail = Jail::new(dir.path().join("box/vm/root"));
    jail.bind("/usr/bin/env", Access::Exec)
        .bind(&volume, Access::ReadWrite)
        .bind(&run, Access::ReadWrite)
        .bind("/dev/null", Access::Device);
    let prepared = jail.prepare().unwrap();
    let binds = binds(&prepared, jail.root.to_str().unwrap());
    let want = |p: &Path| (p.display().to_string(), p.display().to_string());
    assert_eq!(binds[0], want(Path::new("/usr")));
    assert!(binds.contains(&want(&volume)) && binds.contains(&want(&run)));
    assert!(binds.contains(&want(Path::new("/dev/null"))));
    assert!(!binds.iter().any(|(s, _)| s == "/usr/bin/env"), "{binds:?}");
    let mut mkdirs: Vec<&CString> = prepared
        .steps
        .iter()
        .filter_map(|s| match s {
            Step::Mkdir(p) => Some(p),
            _ => None,
        })
        .collect();
    let count = mkdirs.len();
    mkdirs.sort();
    mkdirs.dedup();
    assert_eq!(mkdirs.len(), count, "a dir made twice");
    assert!(jail
        .clone()
        .bind("relative", Access::ReadOnly)
        .prepare()
        .is_err());
}

#[test]
fn a_path_bound_elsewhere_lands_there() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    std::fs::write(&file, "").unwrap();
    let mut jail = Jail::new(dir.path().join("root"));
    jail.bind_at(&file, "/data", Access::ReadOnly)
        .empty_file("/etc/mtab");
    let prepared = jail.prepare().unwrap();
    let binds = binds(&prepared, jail.root.to_str().unwrap());
    assert!(binds.contains(&(file.display().to_string(), "/data".to_owned())));
    let mtab = jail.root.join("etc/mtab");
    assert!(prepared
        .steps
        .iter()
        .any(|s| matches!(s, Step::File(p) if p.to_str().ok() == mtab.to_str())));
}

/// Inside the jail, after the drop, the bounding set is empty up to the kernel's
/// `cap_last_cap`, no set holds a capability, and the root holds only what was listed.
#[test]
fn the_jail_drops_every_capability_up_to_cap_last_cap() {
    if !is_root() {
        berth_testkit::skip("root", "entering a jail needs root");
        return;
    }
    let last: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir(&root).unwrap();
    let prepared = Jail::new(&root)
        .bind("/dev/null", Access::Device)
        .prepare()
        .unwrap();
    let drop = PrivilegeDrop::to(65534, 65534).unwrap();
    assert_eq!(drop.last_cap(), last);
    let code = in_child(|| {
        if prepared.enter().is_err() {
            return 1;
        }
        if drop.apply().is_err() {
            return 2;
        }
        if !(0..=last).all(|cap| caps::in_bounding_set(cap) == Some(false)) {
            return 3;
        }
        if caps::in_bounding_set(last + 1).is_some() {
            return 4;
        }
        if !caps::none_held().unwrap_or(false) {
            return 5;
        }
        // SAFETY: access(2) on static paths.
        let exists = |p: &std::ffi::CStr| unsafe { libc::access(p.as_ptr(), libc::F_OK) } == 0;
        if !exists(c"/usr/bin") || !exists(c"/dev/null") || exists(c"/proc/self") {
            return 6;
        }
        // SAFETY: integer-only system calls.
        if unsafe { (libc::getuid(), libc::getgid()) } != (65534, 65534) {
            return 7;
        }
        0
    });
    assert_eq!(code, 0);
    // The host sees none of it: the root dir stayed empty.
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}
