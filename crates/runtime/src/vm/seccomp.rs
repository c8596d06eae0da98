//! The seccomp filter of vhost-device-vsock, which has none of its own (QEMU installs its
//! own with `-sandbox`). A deny list, not an allow list: the backend's exact system calls
//! vary with its version and its Rust runtime, and a wrong allow list would kill it in the
//! middle of a box's life. What it refuses (`EPERM`) is what a process that moves bytes
//! between a guest's vsock rings and Unix sockets never needs and what a kernel exploit
//! most often starts from: mounts and namespaces, ptrace and cross-process memory, module
//! and kexec loading, bpf, perf, keyrings, userfaultfd, io_uring, and every socket family
//! but `AF_UNIX`. (`execve` stays: the filter is installed before the exec that starts the
//! backend; `no_new_privs` and the empty jail leave it nothing to gain from another.) Built for the target architecture;
//! x32 numbers are refused the same way.

use std::collections::BTreeMap;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use crate::RuntimeError;

const DENIED: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_open_by_handle_at,
    libc::SYS_name_to_handle_at,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_reboot,
    libc::SYS_acct,
    libc::SYS_quotactl,
];

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Set in the number of an x32-ABI system call (x86_64 only; harmless elsewhere: no such
/// numbers exist).
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

/// The compiled filter.
pub(crate) fn vhost_filter() -> Result<BpfProgram, RuntimeError> {
    let both = |nr: i64| [nr, nr | X32_SYSCALL_BIT];
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED
        .iter()
        .flat_map(|&nr| both(nr))
        .map(|nr| (nr, Vec::new()))
        .collect();
    let not_unix = SeccompCondition::new(
        0,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::Ne,
        libc::AF_UNIX as u64,
    )
    .and_then(|c| SeccompRule::new(vec![c]))
    .map_err(filter_error)?;
    for nr in both(libc::SYS_socket) {
        rules.insert(nr, vec![not_unix.clone()]);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(filter_error)?;
    filter.try_into().map_err(filter_error)
}

fn filter_error(e: impl std::error::Error + Send + Sync + 'static) -> RuntimeError {
    RuntimeError::Io {
        action: "build the seccomp filter of",
        path: "vhost-device-vsock".into(),
        source: std::io::Error::other(e),
    }
}
