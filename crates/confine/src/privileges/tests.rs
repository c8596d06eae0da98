use super::*;
use crate::test_fork::{in_child, is_root};

/// A drop the kernel refuses surfaces as an error naming the step: without `CAP_SETPCAP`
/// the bounding set cannot shrink, and the drop says so instead of going on.
#[test]
fn a_refused_drop_fails_loudly() {
    if !is_root() {
        berth_testkit::skip("root", "a privilege drop needs root");
        return;
    }
    let drop = PrivilegeDrop::to(65534, 65534).unwrap();
    let code = in_child(|| {
        if caps::lower(caps::CAP_SETPCAP).is_err() {
            return 1;
        }
        match drop.apply() {
            Err(StepError {
                step: Step::DropBoundingSet,
                errno: libc::EPERM,
            }) => {}
            _ => return 2,
        }
        // Nothing after the failed step ran: still root.
        // SAFETY: integer-only system call.
        if unsafe { libc::getuid() } != 0 {
            return 3;
        }
        0
    });
    assert_eq!(code, 0);
}

/// After the drop the process is the unprivileged identity, with no groups and no
/// capability in any set.
#[test]
fn the_drop_leaves_no_privilege() {
    if !is_root() {
        berth_testkit::skip("root", "a privilege drop needs root");
        return;
    }
    let drop = PrivilegeDrop::to(65534, 65533).unwrap();
    let code = in_child(|| {
        if drop.apply().is_err() {
            return 1;
        }
        // SAFETY: integer-only system calls; getgroups with size 0 only counts.
        let (uid, gid, groups) = unsafe {
            (
                libc::geteuid(),
                libc::getegid(),
                libc::getgroups(0, std::ptr::null_mut()),
            )
        };
        if (uid, gid, groups) != (65534, 65533, 0) {
            return 2;
        }
        if !caps::none_held().unwrap_or(false) || caps::in_bounding_set(0) != Some(false) {
            return 3;
        }
        // SAFETY: integer-only system call: regaining root is refused.
        if unsafe { libc::setuid(0) } == 0 {
            return 4;
        }
        0
    });
    assert_eq!(code, 0);
}
