//! The whole box in the `sandbox` runtime (runc's OCI profile, applied to berth-init and
//! everything it starts): everything is allowed except the calls a box never needs and that
//! widen the kernel's attack surface (module loading, kexec, bpf, perf, keyrings,
//! userfaultfd, clock and swap control, new namespaces, io_uring, `AF_VSOCK` sockets).
//! The box user's processes get [`super::BOX_USER`] on top.

use super::groups::{
    HOST_CONTROL, IO_URING, KERNEL_SURFACE, KEXEC, KEYRINGS, MODULES, MOUNTS, MOUNT_API,
};
use crate::rule::{refuse, Refusal, Table, When};
use crate::sys;
use crate::syscall::Syscall;

/// `AF_VSOCK`: vsock is not network-namespaced, so a box on a host that has it (a host that
/// is itself a VM, or runs VMs) would reach the host's and its guests' vsock ports.
pub const AF_VSOCK: i32 = 40;

/// `clone` flags that would create namespaces (a nested user namespace gives its creator
/// every capability inside it, and with them the kernel's namespaced attack surface).
pub const CLONE_NEW_NAMESPACES: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWCGROUP) as u64;

/// Namespaces, clocks, logs and obsolete interfaces a box has no use for.
const OTHERS: &[Syscall] = &[
    sys!(SYS_setns),
    sys!(SYS_unshare),
    sys!(SYS_open_by_handle_at),
    sys!(SYS_syslog),
    sys!(SYS_vhangup),
    sys!(SYS_clock_adjtime),
    sys!(SYS_clock_settime),
    sys!(SYS_settimeofday),
    sys!(SYS_lookup_dcookie),
    sys!(SYS_nfsservctl),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_uselib),
];

pub const SANDBOX_BOX: Table = Table {
    name: "sandbox box",
    entries: &[
        refuse(MOUNTS, When::Always, Refusal::Eperm),
        refuse(MOUNT_API, When::Always, Refusal::Eperm),
        refuse(KEYRINGS, When::Always, Refusal::Eperm),
        refuse(KERNEL_SURFACE, When::Always, Refusal::Eperm),
        refuse(MODULES, When::Always, Refusal::Eperm),
        refuse(KEXEC, When::Always, Refusal::Eperm),
        refuse(HOST_CONTROL, When::Always, Refusal::Eperm),
        refuse(OTHERS, When::Always, Refusal::Eperm),
        refuse(
            &[sys!(SYS_clone)],
            When::AnyFlag(CLONE_NEW_NAMESPACES),
            Refusal::Eperm,
        ),
        // clone3 passes its flags in memory, which seccomp cannot read: ENOSYS makes libc
        // fall back to clone, which the rule above checks.
        refuse(&[sys!(SYS_clone3)], When::Always, Refusal::Enosys),
        refuse(IO_URING, When::Always, Refusal::Enosys),
        refuse(
            &[sys!(SYS_socket)],
            When::FamilyIs(AF_VSOCK),
            Refusal::Eafnosupport,
        ),
    ],
};
