//! Running a check in a forked child: a seccomp filter, a jail or a dropped capability
//! cannot be undone, so the test process must not be the one that gets it.

/// Runs `check` in a forked child and returns its exit code: the number `check` returned
/// (0 for success, by convention the index of the first failed check otherwise).
pub fn in_child(check: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child only makes system calls and exits without unwinding.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            let code = check();
            // SAFETY: ends the forked child without running the parent's destructors.
            unsafe { libc::_exit(code) }
        }
        child => {
            let mut status = 0;
            // SAFETY: waits for our own child.
            let waited = unsafe { libc::waitpid(child, &mut status, 0) };
            assert_eq!(waited, child);
            assert!(libc::WIFEXITED(status), "the child died: {status:#x}");
            libc::WEXITSTATUS(status)
        }
    }
}

/// The errno of a raw system call's result (0 when it succeeded).
pub fn errno(rc: libc::c_long) -> i32 {
    if rc < 0 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
    } else {
        0
    }
}

/// Whether this test runs as root (what jails and privilege drops need).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
