//! The box user's processes (berth-init's user filter, on top of the box's own): which
//! system calls they may not make, and what each refusal returns.
//!
//! - `EPERM`: mount and namespace calls, keyrings, `bpf`, `perf_event_open`,
//!   `userfaultfd` (each a large kernel surface a box's programs do not need), and
//!   `clone`/`unshare` with `CLONE_NEWUSER`;
//! - `ENOSYS`: `clone3` (its flags live in memory a filter cannot read; libc falls back to
//!   `clone`) and io_uring (liburing and runtimes that try it fall back to plain calls);
//! - `EAFNOSUPPORT`: `socket`/`socketpair` for any family but `AF_UNIX`, `AF_INET` and
//!   `AF_INET6`. No `AF_VSOCK` (in a VM the user would reach the host's egress port
//!   directly, around berth-init's proxy and its connection cap), no `AF_PACKET`, no
//!   netlink, no module autoloading by family. The answer is what a kernel without the
//!   family says, so programs fall back: glibc's `getaddrinfo` assumes both IP families
//!   when its netlink query fails; `ip` cannot list devices (the box has only loopback).

use super::groups::{IO_URING, KERNEL_SURFACE, KEYRINGS, MOUNTS};
use crate::rule::{refuse, Refusal, Table, When};
use crate::sys;

/// The socket families the box user keeps.
pub const FAMILIES: &[i32] = &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];

pub const BOX_USER: Table = Table {
    name: "box user",
    entries: &[
        refuse(MOUNTS, When::Always, Refusal::Eperm),
        refuse(&[sys!(SYS_setns)], When::Always, Refusal::Eperm),
        refuse(KEYRINGS, When::Always, Refusal::Eperm),
        refuse(KERNEL_SURFACE, When::Always, Refusal::Eperm),
        refuse(
            &[sys!(SYS_unshare), sys!(SYS_clone)],
            When::Flags(libc::CLONE_NEWUSER as u64),
            Refusal::Eperm,
        ),
        refuse(&[sys!(SYS_clone3)], When::Always, Refusal::Enosys),
        refuse(IO_URING, When::Always, Refusal::Enosys),
        refuse(
            &[sys!(SYS_socket), sys!(SYS_socketpair)],
            When::FamilyNotIn(FAMILIES),
            Refusal::Eafnosupport,
        ),
    ],
};
