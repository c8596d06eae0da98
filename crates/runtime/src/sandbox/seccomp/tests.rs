use super::*;

#[test]
fn denies_module_loading_and_namespaces_and_allows_the_rest() {
    let f = filter();
    assert_eq!(f.default_action(), LinuxSeccompAction::ScmpActAllow);
    let json = serde_json::to_value(&f).unwrap();
    let text = json.to_string();
    for name in [
        "init_module",
        "finit_module",
        "kexec_load",
        "bpf",
        "keyctl",
        "userfaultfd",
        "unshare",
    ] {
        assert!(text.contains(&format!("\"{name}\"")), "{name}");
    }
    assert_eq!(json["defaultAction"], "SCMP_ACT_ALLOW");
    assert!(json["architectures"]
        .as_array()
        .is_some_and(|a| !a.is_empty()));
    let rules = f.syscalls().as_ref().unwrap();
    assert!(rules
        .iter()
        .all(|r| r.action() == LinuxSeccompAction::ScmpActErrno));
    assert!(rules
        .iter()
        .any(|r| r.names() == &["clone"] && r.args().is_some()));
    assert!(text.contains("\"io_uring_setup\""));
    let vsock = rules.iter().find(|r| r.names() == &["socket"]).unwrap();
    assert_eq!(vsock.errno_ret(), Some(libc::EAFNOSUPPORT as u32));
    let arg = &vsock.args().as_ref().unwrap()[0];
    assert_eq!((arg.value(), arg.value_two()), (0xffff_ffff, Some(40)));
}

/// The profile derived from the one table refuses what the profile written by hand did:
/// the same names with the same errno, and one `clone` rule per namespace flag.
#[test]
fn the_derived_profile_names_what_the_hand_written_one_did() {
    const DENIED: &[&str] = &[
        "acct",
        "add_key",
        "bpf",
        "clock_adjtime",
        "clock_settime",
        "create_module",
        "delete_module",
        "finit_module",
        "fsconfig",
        "fsmount",
        "fsopen",
        "fspick",
        "get_kernel_syms",
        "init_module",
        "kexec_file_load",
        "kexec_load",
        "keyctl",
        "lookup_dcookie",
        "mount",
        "mount_setattr",
        "move_mount",
        "nfsservctl",
        "open_by_handle_at",
        "open_tree",
        "perf_event_open",
        "pivot_root",
        "quotactl",
        "reboot",
        "request_key",
        "setns",
        "settimeofday",
        "stime",
        "swapoff",
        "swapon",
        "syslog",
        "umount",
        "umount2",
        "unshare",
        "uselib",
        "userfaultfd",
        "vhangup",
    ];
    const NOT_IMPLEMENTED: &[&str] = &[
        "clone3",
        "io_uring_enter",
        "io_uring_register",
        "io_uring_setup",
    ];
    let rules = rules();
    let unconditional = |errno: i32| -> Vec<String> {
        rules
            .iter()
            .filter(|r| r.args().is_none() && r.errno_ret() == Some(errno as u32))
            .flat_map(|r| r.names().clone())
            .collect()
    };
    assert_eq!(unconditional(libc::EPERM), DENIED);
    assert_eq!(unconditional(libc::ENOSYS), NOT_IMPLEMENTED);
    let clone: Vec<u64> = rules
        .iter()
        .filter(|r| r.names() == &["clone"])
        .map(|r| r.args().as_ref().unwrap()[0].value())
        .collect();
    assert_eq!(clone.len(), 7);
    assert_eq!(
        clone.iter().fold(0, |all, bit| all | bit),
        berth_confine::tables::CLONE_NEW_NAMESPACES
    );
    assert!(SANDBOX_BOX
        .rules()
        .all(|r| !matches!(r.when, When::FamilyNotIn(_))));
}
