//! Dropping every privilege before exec, each step checked.
//!
//! In order: every capability the kernel knows leaves the bounding set (0 to the last one,
//! found before the fork: a drop that fails is an error, not the end of the loop), the
//! ambient set is cleared, the supplementary groups dropped, then the gid and uid become
//! unprivileged (leaving uid 0 clears the permitted and effective sets) and `capset` empties
//! the inheritable set. The process then holds no capability and cannot regain one by exec.

use crate::caps;
use crate::error::{check, ConfineError, Step, StepError};

/// An unprivileged identity to become, and how far the bounding set goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivilegeDrop {
    uid: u32,
    gid: u32,
    last_cap: u32,
}

impl PrivilegeDrop {
    /// Prepares, before the fork, the drop to `uid`/`gid`.
    pub fn to(uid: u32, gid: u32) -> Result<PrivilegeDrop, ConfineError> {
        Ok(PrivilegeDrop {
            uid,
            gid,
            last_cap: caps::last_cap().map_err(ConfineError::BoundingSet)?,
        })
    }

    /// The same drop to other ids (computed before the fork: it only copies).
    pub fn with_ids(self, uid: u32, gid: u32) -> PrivilegeDrop {
        PrivilegeDrop { uid, gid, ..self }
    }

    /// The highest capability [`PrivilegeDrop::apply`] drops.
    pub fn last_cap(&self) -> u32 {
        self.last_cap
    }

    /// Drops every privilege (see the module doc). Runs between fork and exec: system calls
    /// only, no allocation. Supplementary groups that cannot be dropped (`EPERM`: a user
    /// namespace whose `setgroups` is denied) are fine only when there are none.
    pub fn apply(&self) -> Result<(), StepError> {
        for cap in 0..=self.last_cap {
            // SAFETY: PR_CAPBSET_DROP takes an integer and touches no memory.
            let rc =
                unsafe { libc::prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(cap), 0, 0, 0) };
            check(rc.into(), Step::DropBoundingSet)?;
        }
        // SAFETY: integer-only prctl.
        let rc = unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            )
        };
        check(rc.into(), Step::ClearAmbient)?;
        drop_groups()?;
        // SAFETY: integer-only system calls.
        check(
            unsafe { libc::setresgid(self.gid, self.gid, self.gid) }.into(),
            Step::SetGid,
        )?;
        // SAFETY: integer-only system call.
        check(
            unsafe { libc::setresuid(self.uid, self.uid, self.uid) }.into(),
            Step::SetUid,
        )?;
        caps::clear_all()
    }
}

fn drop_groups() -> Result<(), StepError> {
    // SAFETY: a null list with size 0 clears the supplementary groups.
    if unsafe { libc::setgroups(0, std::ptr::null()) } == 0 {
        return Ok(());
    }
    let refused = StepError::last(Step::DropGroups);
    // SAFETY: size 0 with a null list only counts the groups.
    let held = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    if refused.errno == libc::EPERM && held == 0 {
        return Ok(());
    }
    Err(refused)
}

#[cfg(test)]
mod tests;
