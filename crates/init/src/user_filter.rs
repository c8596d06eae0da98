//! The seccomp programs of the box user's processes: which system calls they may not make,
//! and what each refusal returns.
//!
//! The table ([`RULES`]) is written once in terms of `libc::SYS_*` numbers, so it is built
//! for the architecture berth-init is compiled for ([`arch`]: x86_64, whose x32 ABI passes
//! the same architecture check with bit 30 set in the number, so every rule covers that
//! number too; or aarch64). A call from another ABI (i386 on x86_64, arm32 on aarch64) fails
//! seccompiler's architecture check and kills the process.
//!
//! What is refused, and why each answer:
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

use std::collections::BTreeMap;

use seccompiler::{
    BackendError, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition,
    SeccompFilter, SeccompRule,
};

/// The architecture the programs are built for, and the ABI aliases of its numbers.
#[cfg(target_arch = "x86_64")]
mod arch {
    pub const TARGET: seccompiler::TargetArch = seccompiler::TargetArch::x86_64;
    /// `__X32_SYSCALL_BIT`: an x32 call is the x86_64 number with this bit set.
    pub const ALIASES: &[i64] = &[0, 0x4000_0000];
}

#[cfg(target_arch = "aarch64")]
mod arch {
    pub const TARGET: seccompiler::TargetArch = seccompiler::TargetArch::aarch64;
    pub const ALIASES: &[i64] = &[0];
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("berth-init's user seccomp filter is built for x86_64 and aarch64 only");

/// What a refused call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refusal {
    Eperm,
    Enosys,
    Eafnosupport,
}

impl Refusal {
    pub fn errno(self) -> u32 {
        let errno = match self {
            Refusal::Eperm => libc::EPERM,
            Refusal::Enosys => libc::ENOSYS,
            Refusal::Eafnosupport => libc::EAFNOSUPPORT,
        };
        errno as u32
    }
}

/// When a listed call is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Always,
    /// Argument 0 (the flags of `clone`/`unshare`) has these bits set.
    Flags(u64),
    /// Argument 0 (the address family, an `int`) is none of these.
    FamilyNotIn(&'static [i32]),
}

/// One refused system call.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub nr: i64,
    pub when: When,
    pub refusal: Refusal,
}

/// The socket families the box user keeps.
pub const FAMILIES: &[i32] = &[libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];

const fn rule(nr: libc::c_long, when: When, refusal: Refusal) -> Rule {
    Rule { nr, when, refusal }
}

const NEWUSER: When = When::Flags(libc::CLONE_NEWUSER as u64);
const OTHER_FAMILY: When = When::FamilyNotIn(FAMILIES);

/// Every refusal of the box user's filter.
pub const RULES: &[Rule] = &[
    rule(libc::SYS_mount, When::Always, Refusal::Eperm),
    rule(libc::SYS_umount2, When::Always, Refusal::Eperm),
    rule(libc::SYS_pivot_root, When::Always, Refusal::Eperm),
    rule(libc::SYS_setns, When::Always, Refusal::Eperm),
    rule(libc::SYS_keyctl, When::Always, Refusal::Eperm),
    rule(libc::SYS_add_key, When::Always, Refusal::Eperm),
    rule(libc::SYS_request_key, When::Always, Refusal::Eperm),
    rule(libc::SYS_bpf, When::Always, Refusal::Eperm),
    rule(libc::SYS_perf_event_open, When::Always, Refusal::Eperm),
    rule(libc::SYS_userfaultfd, When::Always, Refusal::Eperm),
    rule(libc::SYS_unshare, NEWUSER, Refusal::Eperm),
    rule(libc::SYS_clone, NEWUSER, Refusal::Eperm),
    rule(libc::SYS_clone3, When::Always, Refusal::Enosys),
    rule(libc::SYS_io_uring_setup, When::Always, Refusal::Enosys),
    rule(libc::SYS_io_uring_enter, When::Always, Refusal::Enosys),
    rule(libc::SYS_io_uring_register, When::Always, Refusal::Enosys),
    rule(libc::SYS_socket, OTHER_FAMILY, Refusal::Eafnosupport),
    rule(libc::SYS_socketpair, OTHER_FAMILY, Refusal::Eafnosupport),
];

/// One BPF program per kind of refusal (a seccomp program has one answer for what its
/// rules match), compiled for [`arch::TARGET`].
pub fn compile() -> Result<Vec<BpfProgram>, BackendError> {
    let mut by_refusal: BTreeMap<Refusal, BTreeMap<i64, Vec<SeccompRule>>> = BTreeMap::new();
    for rule in RULES {
        let conditions = conditions(rule.when)?;
        for alias in arch::ALIASES {
            let rules = by_refusal
                .entry(rule.refusal)
                .or_default()
                .entry(rule.nr | alias)
                .or_default();
            if let Some(conditions) = &conditions {
                rules.push(SeccompRule::new(conditions.clone())?);
            }
        }
    }
    by_refusal
        .into_iter()
        .map(|(refusal, rules)| {
            SeccompFilter::new(
                rules,
                SeccompAction::Allow,
                SeccompAction::Errno(refusal.errno()),
                arch::TARGET,
            )
            .and_then(BpfProgram::try_from)
        })
        .collect()
}

/// The conditions (all must hold) under which the call is refused; `None`: always.
fn conditions(when: When) -> Result<Option<Vec<SeccompCondition>>, BackendError> {
    let cond = |len, op, value| SeccompCondition::new(0, len, op, value);
    let conditions = match when {
        When::Always => return Ok(None),
        When::Flags(bits) => vec![cond(
            SeccompCmpArgLen::Qword,
            SeccompCmpOp::MaskedEq(bits),
            bits,
        )],
        // An `int`: only the low half counts (the kernel ignores the upper one too).
        When::FamilyNotIn(families) => families
            .iter()
            .map(|&f| cond(SeccompCmpArgLen::Dword, SeccompCmpOp::Ne, f as u64))
            .collect(),
    };
    conditions.into_iter().collect::<Result<_, _>>().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(nr: libc::c_long) -> Rule {
        *RULES.iter().find(|r| r.nr == nr).unwrap()
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
        // Each number once: a second rule for the same call would be silently merged.
        let mut numbers: Vec<i64> = RULES.iter().map(|r| r.nr).collect();
        numbers.sort();
        numbers.dedup();
        assert_eq!(numbers.len(), RULES.len());
    }

    #[test]
    fn the_numbers_are_this_architectures() {
        // Spot checks against each ABI's table (arch/*/entry/syscalls, asm-generic/unistd.h).
        let (socket, io_uring_setup, bpf) = if cfg!(target_arch = "x86_64") {
            (41, 425, 321)
        } else {
            (198, 425, 280)
        };
        assert_eq!(find(libc::SYS_socket).nr, socket);
        assert_eq!(find(libc::SYS_io_uring_setup).nr, io_uring_setup);
        assert_eq!(find(libc::SYS_bpf).nr, bpf);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(arch::ALIASES, [0, 0x4000_0000]);
        } else {
            assert_eq!(arch::ALIASES, [0]);
        }
    }

    #[test]
    fn one_program_per_refusal() {
        let programs = compile().unwrap();
        assert_eq!(programs.len(), 3);
        assert!(programs.iter().all(|p| !p.is_empty()));
    }

    /// The programs act as the table says, in a forked child (a filter cannot be removed).
    #[test]
    fn the_programs_refuse_and_allow_as_the_table_says() {
        let programs = compile().unwrap();
        // SAFETY: the child only makes system calls and exits; it touches no lock.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let errno = |rc: libc::c_long| {
                    if rc < 0 {
                        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
                    } else {
                        0
                    }
                };
                let mut ok = true;
                for program in &programs {
                    ok &= seccompiler::apply_filter(program).is_ok();
                }
                // Each errno is read right after its call.
                // SAFETY: raw system calls with integer arguments or null pointers.
                let checks = unsafe {
                    [
                        (
                            errno(libc::syscall(libc::SYS_io_uring_setup, 1, 0)),
                            libc::ENOSYS,
                        ),
                        (
                            errno(libc::syscall(libc::SYS_socket, 40, libc::SOCK_STREAM, 0)),
                            libc::EAFNOSUPPORT,
                        ),
                        (
                            errno(libc::syscall(
                                libc::SYS_socket,
                                libc::AF_NETLINK,
                                libc::SOCK_RAW,
                                0,
                            )),
                            libc::EAFNOSUPPORT,
                        ),
                        (
                            errno(libc::syscall(
                                libc::SYS_socket,
                                (1i64 << 32) | 17,
                                libc::SOCK_RAW,
                                0,
                            )),
                            libc::EAFNOSUPPORT,
                        ),
                        (
                            errno(libc::syscall(libc::SYS_keyctl, 0, -3, 0)),
                            libc::EPERM,
                        ),
                        (
                            errno(libc::syscall(
                                libc::SYS_socket,
                                libc::AF_UNIX,
                                libc::SOCK_STREAM,
                                0,
                            )),
                            0,
                        ),
                        (
                            errno(libc::syscall(
                                libc::SYS_socket,
                                libc::AF_INET6,
                                libc::SOCK_DGRAM,
                                0,
                            )),
                            0,
                        ),
                    ]
                };
                for (got, want) in checks {
                    ok &= got == want;
                }
                // SAFETY: ends the forked child without running the parent's destructors.
                unsafe { libc::_exit(if ok { 0 } else { 1 }) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }
}
