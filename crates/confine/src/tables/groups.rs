//! Groups of calls that several tables refuse, written once so the tables cannot drift.

use crate::sys;
use crate::syscall::Syscall;

/// Mounting and changing the root.
pub const MOUNTS: &[Syscall] = &[sys!(SYS_mount), sys!(SYS_umount2), sys!(SYS_pivot_root)];

/// The file-descriptor mount API (Linux 5.2): mounts by another road.
pub const MOUNT_API: &[Syscall] = &[
    sys!(SYS_fsopen),
    sys!(SYS_fsconfig),
    sys!(SYS_fsmount),
    sys!(SYS_fspick),
    sys!(SYS_move_mount),
    sys!(SYS_open_tree),
    sys!(SYS_mount_setattr),
];

/// Kernel keyrings.
pub const KEYRINGS: &[Syscall] = &[sys!(SYS_keyctl), sys!(SYS_add_key), sys!(SYS_request_key)];

/// Large kernel surfaces where exploits most often start.
pub const KERNEL_SURFACE: &[Syscall] = &[
    sys!(SYS_bpf),
    sys!(SYS_perf_event_open),
    sys!(SYS_userfaultfd),
];

/// io_uring: a second system call interface that seccomp cannot see into.
pub const IO_URING: &[Syscall] = &[
    sys!(SYS_io_uring_setup),
    sys!(SYS_io_uring_enter),
    sys!(SYS_io_uring_register),
];

/// Loading and removing kernel modules.
pub const MODULES: &[Syscall] = &[
    sys!(SYS_init_module),
    sys!(SYS_finit_module),
    sys!(SYS_delete_module),
];

/// Booting another kernel.
pub const KEXEC: &[Syscall] = &[sys!(SYS_kexec_load), sys!(SYS_kexec_file_load)];

/// Controlling the host: reboot, swap, process accounting, quotas.
pub const HOST_CONTROL: &[Syscall] = &[
    sys!(SYS_reboot),
    sys!(SYS_swapon),
    sys!(SYS_swapoff),
    sys!(SYS_acct),
    sys!(SYS_quotactl),
];

/// Reading and writing another process.
pub const CROSS_PROCESS: &[Syscall] = &[
    sys!(SYS_ptrace),
    sys!(SYS_process_vm_readv),
    sys!(SYS_process_vm_writev),
];

/// Opening files by handle, around the path walk (and so around a jail's root).
pub const FILE_HANDLES: &[Syscall] = &[sys!(SYS_open_by_handle_at), sys!(SYS_name_to_handle_at)];
