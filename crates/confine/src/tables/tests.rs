use super::*;
use crate::rule::{Refusal, Rule, When};

fn find(nr: libc::c_long) -> Rule {
    BOX_USER.find(nr).unwrap()
}

#[test]
fn the_table_refuses_what_the_box_user_must_not_reach() {
    for nr in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_clone3,
    ] {
        assert_eq!(find(nr).refusal, Refusal::Enosys, "{nr}");
        assert_eq!(find(nr).when, When::Always, "{nr}");
    }
    for nr in [
        libc::SYS_bpf,
        libc::SYS_userfaultfd,
        libc::SYS_perf_event_open,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_mount,
        libc::SYS_setns,
    ] {
        assert_eq!(find(nr).refusal, Refusal::Eperm, "{nr}");
        assert_eq!(find(nr).when, When::Always, "{nr}");
    }
    for nr in [libc::SYS_socket, libc::SYS_socketpair] {
        assert_eq!(find(nr).refusal, Refusal::Eafnosupport);
        assert_eq!(find(nr).when, When::FamilyNotIn(FAMILIES));
    }
    assert_eq!(FAMILIES, [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6]);
    assert_eq!(
        find(libc::SYS_clone).when,
        When::Flags(libc::CLONE_NEWUSER as u64)
    );
    assert_eq!(BOX_USER.rules().count(), 18);
}

/// Each number once in every table: a second rule for the same call would be silently
/// merged.
#[test]
fn each_table_names_each_call_once() {
    for table in ALL {
        let mut numbers: Vec<i64> = table.rules().map(|r| r.call.nr).collect();
        let count = numbers.len();
        numbers.sort();
        numbers.dedup();
        assert_eq!(numbers.len(), count, "{}", table.name);
    }
}

#[test]
fn the_numbers_are_this_architectures() {
    // Spot checks against each ABI's table (arch/*/entry/syscalls, asm-generic/unistd.h).
    let (socket, io_uring_setup, bpf) = if cfg!(target_arch = "x86_64") {
        (41, 425, 321)
    } else {
        (198, 425, 280)
    };
    assert_eq!(find(libc::SYS_socket).call.nr, socket);
    assert_eq!(find(libc::SYS_io_uring_setup).call.nr, io_uring_setup);
    assert_eq!(find(libc::SYS_bpf).call.nr, bpf);
}

/// What the bridge and the volume tools refuse (they had tables of their own before, which
/// these counts and spot checks pin).
#[test]
fn the_bridge_and_tool_tables_refuse_what_they_did() {
    assert_eq!(VMM_BRIDGE.rules().count(), 31);
    assert!(VMM_BRIDGE.rules().all(|r| r.refusal == Refusal::Eperm));
    assert_eq!(
        VMM_BRIDGE.find(libc::SYS_socket).unwrap().when,
        When::FamilyNotIn(&[libc::AF_UNIX])
    );
    let tool_count = if cfg!(target_arch = "x86_64") { 81 } else { 72 };
    assert_eq!(VOLUME_TOOL.rules().count(), tool_count);
    assert!(VOLUME_TOOL
        .rules()
        .all(|r| r.refusal == Refusal::Eperm && r.when == When::Always));
    for nr in [
        libc::SYS_clone,
        libc::SYS_socket,
        libc::SYS_fchmodat,
        libc::SYS_setresuid,
        libc::SYS_mount,
        452,
    ] {
        assert!(VOLUME_TOOL.find(nr).is_some(), "{nr}");
    }
}

#[test]
fn the_sandbox_table_denies_namespaces_and_vsock() {
    let clone = SANDBOX_BOX.find(libc::SYS_clone).unwrap();
    assert_eq!(clone.when, When::AnyFlag(CLONE_NEW_NAMESPACES));
    assert_eq!(CLONE_NEW_NAMESPACES.count_ones(), 7);
    let socket = SANDBOX_BOX.find(libc::SYS_socket).unwrap();
    assert_eq!(
        (socket.when, socket.refusal),
        (When::FamilyIs(40), Refusal::Eafnosupport)
    );
}
