//! Entering a [`PreparedJail`] in the forked child: system calls only.

use super::{PreparedJail, Step as Build};
use crate::error::{check, Step, StepError};

/// The root tmpfs: small, and nothing on it runs, is a device or is setuid.
const ROOT_OPTIONS: &std::ffi::CStr = c"mode=0755,size=64k,nr_inodes=512";

impl PreparedJail {
    /// Enters the jail: a private mount namespace, the root built on a fresh tmpfs,
    /// `pivot_root` into it, the host's tree detached, the root made read-only. Runs
    /// between fork and exec: no allocation, no locks.
    pub fn enter(&self) -> Result<(), StepError> {
        let null = std::ptr::null::<libc::c_char>();
        let mount = |source, target, fstype, flags, data: *const libc::c_void, step| {
            // SAFETY: NUL-terminated strings this value owns (or static ones), or null.
            check(
                unsafe { libc::mount(source, target, fstype, flags, data) }.into(),
                step,
            )
        };
        // SAFETY: integer-only system call.
        check(
            unsafe { libc::unshare(libc::CLONE_NEWNS) }.into(),
            Step::UnshareMountNamespace,
        )?;
        mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
            Step::MakeMountsPrivate,
        )?;
        mount(
            c"tmpfs".as_ptr(),
            self.root.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            ROOT_OPTIONS.as_ptr().cast(),
            Step::MountRoot,
        )?;
        for step in &self.steps {
            match step {
                Build::Mkdir(path) => {
                    // SAFETY: a NUL-terminated path this value owns.
                    if unsafe { libc::mkdir(path.as_ptr(), 0o755) } < 0 {
                        let failed = StepError::last(Step::MakeDirectory);
                        if failed.errno != libc::EEXIST {
                            return Err(failed);
                        }
                    }
                }
                Build::Symlink { target, link } => check(
                    // SAFETY: NUL-terminated paths this value owns.
                    unsafe { libc::symlink(target.as_ptr(), link.as_ptr()) }.into(),
                    Step::Symlink,
                )?,
                Build::File(path) => {
                    // SAFETY: a NUL-terminated path this value owns; the fd is closed below.
                    let fd = unsafe {
                        libc::open(
                            path.as_ptr(),
                            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                            0o644,
                        )
                    };
                    check(fd.into(), Step::CreateMountPoint)?;
                    // SAFETY: closes the fd opened above, once.
                    unsafe { libc::close(fd) };
                }
                Build::Bind {
                    source,
                    target,
                    flags,
                } => {
                    mount(
                        source.as_ptr(),
                        target.as_ptr(),
                        null,
                        libc::MS_BIND,
                        std::ptr::null(),
                        Step::Bind,
                    )?;
                    mount(
                        null,
                        target.as_ptr(),
                        null,
                        *flags,
                        std::ptr::null(),
                        Step::RemountBind,
                    )?;
                }
            }
        }
        // SAFETY: NUL-terminated paths; pivot_root(".", ".") stacks the old root on the
        // new one, and detaching it leaves the jail the only tree this namespace holds.
        unsafe {
            check(libc::chdir(self.root.as_ptr()).into(), Step::ChdirRoot)?;
            check(
                libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()),
                Step::PivotRoot,
            )?;
            check(
                libc::umount2(c".".as_ptr(), libc::MNT_DETACH).into(),
                Step::DetachHostTree,
            )?;
            check(libc::chdir(c"/".as_ptr()).into(), Step::ChdirRoot)?;
        }
        mount(
            null,
            c"/".as_ptr(),
            null,
            libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
            Step::MakeRootReadOnly,
        )
    }
}
