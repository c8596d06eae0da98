//! A host tool that parses a box volume image (e2fsck, resize2fs, e2undo): a box's guest
//! root may have written any bytes into that image, so the tool's parser is attack surface.
//! Refused (`EPERM`): mounts, namespaces, ptrace, sockets, module and kexec loading, bpf,
//! keyrings, io_uring, new processes, id changes and changes to a file's mode, owner or
//! xattrs. e2fsprogs needs file I/O only.

use super::groups::{
    CROSS_PROCESS, FILE_HANDLES, HOST_CONTROL, IO_URING, KERNEL_SURFACE, KEXEC, KEYRINGS, MODULES,
    MOUNTS, MOUNT_API,
};
use crate::rule::{refuse, Refusal, Table, When};
use crate::sys;
use crate::syscall::{Syscall, FCHMODAT2};

/// The files it is lent stay as berth made them: no mode, owner or xattr changes.
const FILE_ATTRIBUTES: &[Syscall] = &[
    sys!(SYS_fchmod),
    sys!(SYS_fchmodat),
    FCHMODAT2,
    sys!(SYS_fchown),
    sys!(SYS_fchownat),
    sys!(SYS_setxattr),
    sys!(SYS_lsetxattr),
    sys!(SYS_fsetxattr),
    sys!(SYS_removexattr),
    sys!(SYS_lremovexattr),
    sys!(SYS_fremovexattr),
];

/// Changing who it is.
const IDENTITY: &[Syscall] = &[
    sys!(SYS_setuid),
    sys!(SYS_setgid),
    sys!(SYS_setreuid),
    sys!(SYS_setregid),
    sys!(SYS_setresuid),
    sys!(SYS_setresgid),
    sys!(SYS_setgroups),
    sys!(SYS_capset),
];

/// What a file system tool has no use for besides the groups above.
const OTHERS: &[Syscall] = &[
    sys!(SYS_chroot),
    sys!(SYS_unshare),
    sys!(SYS_setns),
    sys!(SYS_pidfd_getfd),
    sys!(SYS_socket),
    sys!(SYS_socketpair),
    sys!(SYS_connect),
    sys!(SYS_bind),
    sys!(SYS_listen),
    sys!(SYS_clone),
    sys!(SYS_clone3),
    sys!(SYS_syslog),
    sys!(SYS_mknodat),
    sys!(SYS_settimeofday),
    sys!(SYS_clock_settime),
    sys!(SYS_adjtimex),
    sys!(SYS_sethostname),
    sys!(SYS_setdomainname),
    sys!(SYS_vhangup),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_fork),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_vfork),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_mknod),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_ioperm),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_iopl),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_uselib),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_chmod),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_chown),
    #[cfg(target_arch = "x86_64")]
    sys!(SYS_lchown),
];

pub const VOLUME_TOOL: Table = Table {
    name: "volume tool",
    entries: &[
        refuse(MOUNTS, When::Always, Refusal::Eperm),
        refuse(MOUNT_API, When::Always, Refusal::Eperm),
        refuse(FILE_HANDLES, When::Always, Refusal::Eperm),
        refuse(CROSS_PROCESS, When::Always, Refusal::Eperm),
        refuse(MODULES, When::Always, Refusal::Eperm),
        refuse(KEXEC, When::Always, Refusal::Eperm),
        refuse(KERNEL_SURFACE, When::Always, Refusal::Eperm),
        refuse(KEYRINGS, When::Always, Refusal::Eperm),
        refuse(IO_URING, When::Always, Refusal::Eperm),
        refuse(HOST_CONTROL, When::Always, Refusal::Eperm),
        refuse(IDENTITY, When::Always, Refusal::Eperm),
        refuse(FILE_ATTRIBUTES, When::Always, Refusal::Eperm),
        refuse(OTHERS, When::Always, Refusal::Eperm),
    ],
};
