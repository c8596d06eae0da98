//! The `seal` phase and the sealing of user processes.
//!
//! `berth-init` itself is made non-dumpable (no ptrace, no /proc/1/mem, no core: the boot
//! token lives in its memory), drops supplementary groups, and becomes the child
//! subreaper (a no-op as PID 1; outside a container it makes orphans of our children ours).
//!
//! User processes (`user: "user"`) run as uid/gid 1001 with no capabilities (bounding,
//! ambient and inheritable sets cleared, then `setresuid` clears permitted/effective),
//! `no_new_privs`, and the [`UserFilter`] seccomp programs on top of the bundle's. The BPF
//! programs are compiled once at boot; [`seal_user_child`] runs between fork and exec and
//! only makes system calls (no allocation, no locks).
//!
//! `ptrace` stays allowed: debuggers and `strace` on the user's own processes are useful to
//! an agent, the kernel already limits it to same-uid non-privileged targets, and PID 1 is
//! root-owned and non-dumpable, so the user cannot attach to it.

use std::collections::BTreeMap;
use std::io;

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

#[derive(Debug, thiserror::Error)]
pub enum SealError {
    #[error("seal phase: prctl({what}) failed")]
    Prctl {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("seal phase: cannot drop supplementary groups")]
    Groups(#[source] nix::Error),
    #[error("seal phase: cannot build the user seccomp filter")]
    Seccomp(#[source] seccompiler::BackendError),
}

/// The seccomp programs applied to every user process, compiled once.
#[derive(Debug)]
pub struct UserFilter {
    /// `EPERM` for the namespace/mount/keyring/bpf family.
    deny: BpfProgram,
    /// `ENOSYS` for `clone3`, whose flags live in memory a filter cannot read: libc then
    /// falls back to `clone`, whose flags the `deny` program checks.
    nosys: BpfProgram,
}

/// Set in the number of an x32-ABI system call.
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

const DENIED: &[i64] = &[
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
];

impl UserFilter {
    pub fn build() -> Result<Self, SealError> {
        let arch = TargetArch::x86_64;
        // Each number also with the x32 bit: x32 system calls pass the same arch check.
        let both = |nr: i64| [nr, nr | X32_SYSCALL_BIT];
        let mut rules: BTreeMap<i64, Vec<SeccompRule>> = DENIED
            .iter()
            .flat_map(|&nr| both(nr))
            .map(|nr| (nr, Vec::new()))
            .collect();
        let newuser = libc::CLONE_NEWUSER as u64;
        for nr in [libc::SYS_unshare, libc::SYS_clone]
            .into_iter()
            .flat_map(both)
        {
            let cond = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(newuser),
                newuser,
            )
            .map_err(SealError::Seccomp)?;
            rules.insert(
                nr,
                vec![SeccompRule::new(vec![cond]).map_err(SealError::Seccomp)?],
            );
        }
        let deny = SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(libc::EPERM as u32),
            arch,
        )
        .and_then(BpfProgram::try_from)
        .map_err(SealError::Seccomp)?;
        let nosys = SeccompFilter::new(
            both(libc::SYS_clone3)
                .into_iter()
                .map(|nr| (nr, Vec::new()))
                .collect(),
            SeccompAction::Allow,
            SeccompAction::Errno(libc::ENOSYS as u32),
            arch,
        )
        .and_then(BpfProgram::try_from)
        .map_err(SealError::Seccomp)?;
        Ok(UserFilter { deny, nosys })
    }
}

/// The `seal` phase for `berth-init` itself.
pub fn seal_self() -> Result<(), SealError> {
    prctl("PR_SET_DUMPABLE", libc::PR_SET_DUMPABLE, 0)?;
    prctl("PR_SET_CHILD_SUBREAPER", libc::PR_SET_CHILD_SUBREAPER, 1)?;
    // In a user namespace whose setgroups is denied (rootless), the call fails with EPERM;
    // that is fine when there are no supplementary groups to drop.
    match nix::unistd::setgroups(&[]) {
        Err(nix::errno::Errno::EPERM) if nix::unistd::getgroups().is_ok_and(|g| g.is_empty()) => {}
        other => other.map_err(SealError::Groups)?,
    }
    // SAFETY: umask only changes this process's file mode creation mask.
    unsafe { libc::umask(0o022) };
    Ok(())
}

fn prctl(what: &'static str, option: libc::c_int, arg: libc::c_ulong) -> Result<(), SealError> {
    // SAFETY: these prctl options take one integer argument and touch no memory of ours.
    let rc = unsafe { libc::prctl(option, arg, 0, 0, 0) };
    if rc != 0 {
        return Err(SealError::Prctl {
            what,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Runs in the child between fork and exec (async-signal-safe: system calls only).
/// Starts a new session (its own process group), then for the box user drops every
/// capability and privilege and installs the user filter.
pub fn seal_user_child(as_user: bool, uid: u32, filter: &UserFilter) -> io::Result<()> {
    // SAFETY: setsid takes no arguments.
    check(unsafe { libc::setsid() }.into())?;
    if !as_user {
        return Ok(());
    }
    // Bounding set: drop every capability the kernel knows (EINVAL past the last one).
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes an integer; errors past the last cap are expected.
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        if rc != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            break;
        }
    }
    // SAFETY: integer-only prctl.
    check(
        unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            )
        }
        .into(),
    )?;
    // SAFETY: a null list with size 0 clears the supplementary groups. berth-init has none
    // (dropped in the seal phase), so EPERM (a rootless user namespace) changes nothing.
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0
        && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM)
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: integer-only system calls.
    check(unsafe { libc::setresgid(uid, uid, uid) }.into())?;
    // SAFETY: integer-only system call; leaving uid 0 clears permitted and effective caps.
    check(unsafe { libc::setresuid(uid, uid, uid) }.into())?;
    clear_inheritable()?;
    // `apply_filter` sets no_new_privs first, then installs the program; it does not allocate.
    for program in [&filter.deny, &filter.nosys] {
        seccompiler::apply_filter(program).map_err(|_| io::Error::last_os_error())?;
    }
    Ok(())
}

/// `capset` with every set empty (permitted and effective are already empty after
/// `setresuid` away from 0; this clears inheritable).
fn clear_inheritable() -> io::Result<()> {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: header and data match the kernel's v3 layout (one header, two data structs).
    check(unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) })
}

fn check(rc: libc::c_long) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_filter_compiles() {
        let filter = UserFilter::build().unwrap();
        assert!(filter.deny.len() > DENIED.len());
        assert!(!filter.nosys.is_empty());
    }
}
