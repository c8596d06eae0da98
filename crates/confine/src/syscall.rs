//! A system call by name and by this architecture's number, and the ABI aliases of those
//! numbers.
//!
//! Tables name each call once with [`sys!`](crate::sys), which takes the `libc::SYS_*`
//! constant: the number is then the one of the architecture berth is built for, and the name
//! (what an OCI seccomp profile lists) cannot disagree with it.

/// The seccomp architecture the programs are built for, and the numbers a call from another
/// ABI of the same architecture check uses.
#[cfg(target_arch = "x86_64")]
pub mod arch {
    pub const TARGET: seccompiler::TargetArch = seccompiler::TargetArch::x86_64;
    /// `__X32_SYSCALL_BIT`: an x32 call is the x86_64 number with this bit set, and passes
    /// the x86_64 architecture check, so every rule covers that number too. (An i386 call
    /// fails the architecture check, and the process is killed.)
    pub const ALIASES: &[i64] = &[0, 0x4000_0000];
}

#[cfg(target_arch = "aarch64")]
pub mod arch {
    pub const TARGET: seccompiler::TargetArch = seccompiler::TargetArch::aarch64;
    /// An arm32 call fails the architecture check (and kills the process): no aliases.
    pub const ALIASES: &[i64] = &[0];
}

/// One system call: the `libc` constant's name (`SYS_mount`) and its number here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syscall {
    ident: &'static str,
    pub nr: i64,
}

impl Syscall {
    /// Use [`sys!`](crate::sys) instead, except for a call `libc` does not name yet.
    pub const fn new(ident: &'static str, nr: i64) -> Syscall {
        Syscall { ident, nr }
    }

    /// The kernel's name for it (`mount`), as seccomp profiles list it.
    pub fn name(&self) -> &'static str {
        self.ident.strip_prefix("SYS_").unwrap_or(self.ident)
    }
}

/// `sys!(SYS_mount)`: the call named by that `libc` constant.
#[macro_export]
macro_rules! sys {
    ($ident:ident) => {
        $crate::syscall::Syscall::new(stringify!($ident), $crate::__libc::$ident as i64)
    };
}

/// `fchmodat2` (Linux 6.6): 452 on every architecture (new system calls share one number
/// from 424 on), and not yet in the `libc` crate for all of them.
pub const FCHMODAT2: Syscall = Syscall::new("SYS_fchmodat2", 452);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_named_as_the_kernel_names_it() {
        assert_eq!(sys!(SYS_mount).name(), "mount");
        assert_eq!(sys!(SYS_mount).nr, libc::SYS_mount);
        assert_eq!(FCHMODAT2.name(), "fchmodat2");
    }

    #[test]
    fn the_aliases_are_this_architectures() {
        if cfg!(target_arch = "x86_64") {
            assert_eq!(arch::ALIASES, [0, 0x4000_0000]);
        } else {
            assert_eq!(arch::ALIASES, [0]);
        }
    }
}
