use super::*;
use crate::tables::{BOX_USER, SANDBOX_BOX, VMM_BRIDGE, VOLUME_TOOL};
use crate::test_fork::{errno, in_child};

#[test]
fn one_program_per_refusal() {
    let filter = Filter::compile(&BOX_USER).unwrap();
    assert_eq!(filter.program_count(), 3);
    assert!(filter.programs.iter().all(|p| !p.is_empty()));
    assert_eq!(Filter::compile(&VMM_BRIDGE).unwrap().program_count(), 1);
    assert_eq!(Filter::compile(&VOLUME_TOOL).unwrap().program_count(), 1);
    assert_eq!(Filter::compile(&SANDBOX_BOX).unwrap().program_count(), 3);
}

/// Installs `filter` in a forked child, makes each call and compares its errno: the exit
/// code is 0, or 1 + the index of the first call that answered otherwise (100: no filter).
fn refusals(filter: &Filter, calls: &[(libc::c_long, [libc::c_long; 3], i32)]) -> i32 {
    in_child(|| {
        if filter.install().is_err() {
            return 100;
        }
        for (i, &(nr, [a, b, c], want)) in calls.iter().enumerate() {
            // SAFETY: raw system calls with integer arguments or null pointers; the
            // errno is read right after each.
            let got = errno(unsafe { libc::syscall(nr, a, b, c) });
            if got != want {
                return 1 + i as i32;
            }
        }
        0
    })
}

/// The box user's programs act as the table says, in a forked child (a filter cannot be
/// removed).
#[test]
fn the_programs_refuse_and_allow_as_the_table_says() {
    let filter = Filter::compile(&BOX_USER).unwrap();
    let stream = libc::SOCK_STREAM as libc::c_long;
    let calls = [
        (libc::SYS_io_uring_setup, [1, 0, 0], libc::ENOSYS),
        (libc::SYS_socket, [40, stream, 0], libc::EAFNOSUPPORT),
        (
            libc::SYS_socket,
            [libc::AF_NETLINK.into(), libc::SOCK_RAW.into(), 0],
            libc::EAFNOSUPPORT,
        ),
        // The family is an int: a value whose low half is a refused family is refused.
        (
            libc::SYS_socket,
            [(1 << 32) | 17, libc::SOCK_RAW.into(), 0],
            libc::EAFNOSUPPORT,
        ),
        (libc::SYS_keyctl, [0, -3, 0], libc::EPERM),
        (libc::SYS_socket, [libc::AF_UNIX.into(), stream, 0], 0),
        (
            libc::SYS_socket,
            [libc::AF_INET6.into(), libc::SOCK_DGRAM.into(), 0],
            0,
        ),
    ];
    assert_eq!(refusals(&filter, &calls), 0);
}

/// A subverted bridge: an inet socket and a mount are refused with `EPERM`, while the Unix
/// sockets it works with still open.
#[test]
fn the_bridge_refuses_inet_sockets_and_mounts_but_not_unix_sockets() {
    let filter = Filter::compile(&VMM_BRIDGE).unwrap();
    let stream = libc::SOCK_STREAM as libc::c_long;
    // The mount targets a path that does not exist: without the filter it fails with
    // ENOENT (and mounts nothing), not EPERM.
    let none = c"none".as_ptr() as libc::c_long;
    let target = c"/berth-no-such-dir".as_ptr() as libc::c_long;
    let calls = [
        (libc::SYS_socket, [libc::AF_UNIX.into(), stream, 0], 0),
        (
            libc::SYS_socket,
            [libc::AF_INET.into(), stream, 0],
            libc::EPERM,
        ),
        (
            libc::SYS_socket,
            [libc::AF_INET6.into(), stream, 0],
            libc::EPERM,
        ),
        (libc::SYS_mount, [none, target, none], libc::EPERM),
    ];
    assert_eq!(refusals(&filter, &calls), 0);
}

/// A subverted volume tool cannot open sockets, start processes, change ids or modes.
#[test]
fn the_volume_tool_filter_leaves_file_io_only() {
    let filter = Filter::compile(&VOLUME_TOOL).unwrap();
    let calls = [
        (libc::SYS_socket, [libc::AF_UNIX.into(), 1, 0], libc::EPERM),
        (libc::SYS_clone, [libc::SIGCHLD.into(), 0, 0], libc::EPERM),
        (libc::SYS_setresuid, [0, 0, 0], libc::EPERM),
        (
            libc::SYS_fchmodat,
            [libc::AT_FDCWD.into(), c"/".as_ptr() as libc::c_long, 0o777],
            libc::EPERM,
        ),
        (libc::SYS_getpid, [0, 0, 0], 0),
    ];
    assert_eq!(refusals(&filter, &calls), 0);
}

/// The box-wide table refuses vsock and a new namespace, and leaves a plain `clone` alone.
#[test]
fn the_sandbox_filter_refuses_vsock_and_namespaces() {
    let filter = Filter::compile(&SANDBOX_BOX).unwrap();
    let calls = [
        (
            libc::SYS_socket,
            [40, libc::SOCK_STREAM.into(), 0],
            libc::EAFNOSUPPORT,
        ),
        (
            libc::SYS_unshare,
            [libc::CLONE_NEWNET.into(), 0, 0],
            libc::EPERM,
        ),
        (
            libc::SYS_clone,
            [(libc::CLONE_NEWPID | libc::SIGCHLD).into(), 0, 0],
            libc::EPERM,
        ),
        (libc::SYS_clone3, [0, 0, 0], libc::ENOSYS),
    ];
    assert_eq!(refusals(&filter, &calls), 0);
}
