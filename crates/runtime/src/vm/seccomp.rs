//! The seccomp filter of the `qemu` channel bridge (`berth-init bridge`; QEMU installs its
//! own with `-sandbox`). A deny list, not an allow list: the bridge's exact system calls
//! vary with its Rust runtime and libc, and a wrong allow list would kill it in the middle
//! of a box's life. What it refuses (`EPERM`) is what a process that moves bytes between
//! Unix sockets never needs and what a kernel exploit
//! most often starts from: mounts and namespaces, ptrace and cross-process memory, module
//! and kexec loading, bpf, perf, keyrings, userfaultfd, io_uring, and every socket family
//! but `AF_UNIX`. (`execve` stays: the filter is installed before the exec that starts the
//! bridge; `no_new_privs` and the empty jail leave it nothing to gain from another.) Built for the target architecture;
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
pub(crate) fn bridge_filter() -> Result<BpfProgram, RuntimeError> {
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
        path: "the channel bridge".into(),
        source: std::io::Error::other(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A subverted bridge: under the filter, an inet socket and a mount are refused with
    /// `EPERM`, while the Unix sockets it works with still open.
    #[test]
    fn the_filter_refuses_inet_sockets_and_mounts_but_not_unix_sockets() {
        let Ok(python) = which("python3") else {
            berth_testkit::skip("python3", "no python3 to try the filter with");
            return;
        };
        let filter = bridge_filter().unwrap();
        // The mount targets a path that does not exist: without the filter it fails with
        // ENOENT (and mounts nothing), not EPERM.
        let script = r#"
import ctypes, errno, os, socket
socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):
    try:
        socket.socket(family, socket.SOCK_RAW if family == socket.AF_NETLINK else socket.SOCK_STREAM)
        raise SystemExit("family %d opened" % family)
    except PermissionError:
        pass
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(b"none", b"/berth-no-such-dir", b"tmpfs", 0, None) == 0 or ctypes.get_errno() != errno.EPERM:
    raise SystemExit("mount not refused with EPERM: %d" % ctypes.get_errno())
print("refused")
"#;
        let mut command = std::process::Command::new(python);
        command.args(["-c", script]);
        // SAFETY: the hook makes two prctl calls on memory it owns.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let program = libc::sock_fprog {
                    len: filter.len() as libc::c_ushort,
                    filter: filter.as_ptr() as *mut libc::sock_filter,
                };
                let program: *const libc::sock_fprog = &program;
                if libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, program) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
        let out = command.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "refused");
    }

    fn which(name: &str) -> Result<std::path::PathBuf, ()> {
        crate::vm::find_program("BERTH_TEST_NO_SUCH_VAR", name).ok_or(())
    }
}
