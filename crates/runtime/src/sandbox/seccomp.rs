//! The bundle-level seccomp filter: everything is allowed except the calls a box never
//! needs and that widen the kernel's attack surface (module loading, kexec, bpf, perf,
//! keyrings, userfaultfd, clock and swap control, new namespaces, io_uring, `AF_VSOCK`
//! sockets). berth-init adds a stricter filter of its own for the user's processes.

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArgBuilder, LinuxSeccompBuilder,
    LinuxSeccompOperator, LinuxSyscall, LinuxSyscallBuilder,
};

/// Refused with `EPERM`.
pub const DENIED: &[&str] = &[
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

/// Refused with `ENOSYS` (programs fall back to plain calls).
pub const NOT_IMPLEMENTED: &[&str] = &[
    "clone3",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
];

const EPERM: u32 = libc::EPERM as u32;
const ENOSYS: u32 = libc::ENOSYS as u32;
const EAFNOSUPPORT: u32 = libc::EAFNOSUPPORT as u32;
/// `AF_VSOCK`: vsock is not network-namespaced, so a box on a host that has it (a host
/// that is itself a VM, or runs VMs) would reach the host's and its guests' vsock ports.
const AF_VSOCK: u64 = 40;
/// `clone` flags that would create namespaces (a nested user namespace gives its creator
/// every capability inside it, and with them the kernel's namespaced attack surface).
const CLONE_NEW_NAMESPACES: u64 = (libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWCGROUP) as u64;

/// The filter for this host's architecture (and its compat ABIs).
pub fn filter() -> LinuxSeccomp {
    LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActAllow)
        .architectures(architectures())
        .syscalls(rules())
        .build()
        .expect("a seccomp filter from fixed parts")
}

fn architectures() -> Vec<Arch> {
    if cfg!(target_arch = "x86_64") {
        vec![Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    } else if cfg!(target_arch = "aarch64") {
        vec![Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    } else {
        vec![Arch::ScmpArchNative]
    }
}

fn rules() -> Vec<LinuxSyscall> {
    let deny = LinuxSyscallBuilder::default()
        .names(DENIED.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .action(LinuxSeccompAction::ScmpActErrno)
        .errno_ret(EPERM)
        .build()
        .expect("a syscall rule from fixed parts");
    // clone(flags, …): flags is argument 0 on x86_64 and aarch64 (s390 swaps them).
    // Any namespace flag set → EPERM.
    let clone_ns: Vec<LinuxSyscall> = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWCGROUP,
    ]
    .into_iter()
    .map(|flag| {
        let arg = LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(flag as u64)
            .value_two(flag as u64)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()
            .expect("a seccomp argument from fixed parts");
        LinuxSyscallBuilder::default()
            .names(vec!["clone".to_string()])
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(EPERM)
            .args(vec![arg])
            .build()
            .expect("a syscall rule from fixed parts")
    })
    .collect();
    debug_assert_eq!(clone_ns.len(), CLONE_NEW_NAMESPACES.count_ones() as usize);
    // clone3 passes its flags in memory, which seccomp cannot read: ENOSYS makes libc
    // fall back to clone, which the rules above check. io_uring users fall back too.
    let nosys = LinuxSyscallBuilder::default()
        .names(
            NOT_IMPLEMENTED
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        )
        .action(LinuxSeccompAction::ScmpActErrno)
        .errno_ret(ENOSYS)
        .build()
        .expect("a syscall rule from fixed parts");
    // socket(AF_VSOCK, …), the family compared as the kernel reads it (an int).
    let vsock = LinuxSyscallBuilder::default()
        .names(vec!["socket".to_string()])
        .action(LinuxSeccompAction::ScmpActErrno)
        .errno_ret(EAFNOSUPPORT)
        .args(vec![LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(u64::from(u32::MAX))
            .value_two(AF_VSOCK)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()
            .expect("a seccomp argument from fixed parts")])
        .build()
        .expect("a syscall rule from fixed parts");
    let mut rules = vec![deny, nosys, vsock];
    rules.extend(clone_ns);
    rules
}

#[cfg(test)]
mod tests {
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
        assert_eq!(vsock.errno_ret(), Some(EAFNOSUPPORT));
        let arg = &vsock.args().as_ref().unwrap()[0];
        assert_eq!((arg.value(), arg.value_two()), (0xffff_ffff, Some(40)));
    }
}
