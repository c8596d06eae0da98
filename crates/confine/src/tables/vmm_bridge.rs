//! The `qemu` channel bridge (`berth-init bridge`; QEMU installs its own filter with
//! `-sandbox`). A deny list, not an allow list: the bridge's exact system calls vary with
//! its Rust runtime and libc, and a wrong allow list would kill it in the middle of a box's
//! life. What it refuses (`EPERM`) is what a process that moves bytes between Unix sockets
//! never needs and what a kernel exploit most often starts from: mounts and namespaces,
//! ptrace and cross-process memory, module and kexec loading, bpf, perf, keyrings,
//! userfaultfd, io_uring, and every socket family but `AF_UNIX`. (`execve` stays: the filter
//! is installed before the exec that starts the bridge; `no_new_privs` and the empty jail
//! leave it nothing to gain from another.)

use super::groups::{
    CROSS_PROCESS, FILE_HANDLES, HOST_CONTROL, IO_URING, KERNEL_SURFACE, KEXEC, KEYRINGS, MODULES,
    MOUNTS,
};
use crate::rule::{refuse, Refusal, Table, When};
use crate::sys;

pub const VMM_BRIDGE: Table = Table {
    name: "VMM channel bridge",
    entries: &[
        refuse(MOUNTS, When::Always, Refusal::Eperm),
        refuse(
            &[sys!(SYS_chroot), sys!(SYS_unshare), sys!(SYS_setns)],
            When::Always,
            Refusal::Eperm,
        ),
        refuse(CROSS_PROCESS, When::Always, Refusal::Eperm),
        refuse(KEXEC, When::Always, Refusal::Eperm),
        refuse(MODULES, When::Always, Refusal::Eperm),
        refuse(KERNEL_SURFACE, When::Always, Refusal::Eperm),
        refuse(KEYRINGS, When::Always, Refusal::Eperm),
        refuse(IO_URING, When::Always, Refusal::Eperm),
        refuse(FILE_HANDLES, When::Always, Refusal::Eperm),
        refuse(HOST_CONTROL, When::Always, Refusal::Eperm),
        refuse(
            &[sys!(SYS_socket)],
            When::FamilyNotIn(&[libc::AF_UNIX]),
            Refusal::Eperm,
        ),
    ],
};
