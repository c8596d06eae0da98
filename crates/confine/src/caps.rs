//! Capability sets through `capget`/`capset` (version 3: two 32-bit words per set) and the
//! bounding set, per thread.
//!
//! Lowering one effective capability on one thread is how berth-init's file calls made as
//! the box user stop spending the blocks a volume keeps for root: capability sets are per
//! thread (`capset` with pid 0), and the bit stays permitted, so it can be raised again.

use std::io;

use crate::error::{check, Step, StepError};

/// `CAP_SETPCAP` (linux/capability.h): what dropping from the bounding set needs.
pub const CAP_SETPCAP: u32 = 8;
/// `CAP_SYS_RESOURCE` (linux/capability.h): bypass reserved space, quotas and limits.
pub const CAP_SYS_RESOURCE: u32 = 24;

#[repr(C)]
struct Header {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

fn header() -> Header {
    Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    }
}

fn split(cap: u32) -> (usize, u32) {
    ((cap / 32) as usize, 1 << (cap % 32))
}

fn get() -> io::Result<[Data; 2]> {
    let mut data = [Data::default(); 2];
    // SAFETY: header and data match the kernel's v3 layout (one header, two data structs).
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header(), data.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(data)
}

fn set(data: &[Data; 2]) -> libc::c_long {
    // SAFETY: as in `get`; the kernel only reads `data`.
    unsafe { libc::syscall(libc::SYS_capset, &mut header(), data.as_ptr()) }
}

/// Removes `cap` (< 64) from this thread's effective set. Returns whether it was there
/// (so the caller knows to [`raise`] it again).
pub fn lower(cap: u32) -> io::Result<bool> {
    let mut data = get()?;
    let (word, bit) = split(cap);
    if data[word].effective & bit == 0 {
        return Ok(false);
    }
    data[word].effective &= !bit;
    if set(&data) < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

/// Puts `cap` back into this thread's effective set (it must be permitted).
pub fn raise(cap: u32) -> io::Result<()> {
    let mut data = get()?;
    let (word, bit) = split(cap);
    data[word].effective |= bit;
    if set(&data) < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `cap` is in this thread's effective set.
pub fn effective(cap: u32) -> io::Result<bool> {
    let data = get()?;
    let (word, bit) = split(cap);
    Ok(data[word].effective & bit != 0)
}

/// Whether this thread holds no capability at all: effective, permitted and inheritable
/// are empty.
pub fn none_held() -> io::Result<bool> {
    Ok(get()?
        .iter()
        .all(|d| d.effective == 0 && d.permitted == 0 && d.inheritable == 0))
}

/// Empties the effective, permitted and inheritable sets (system calls only).
pub(crate) fn clear_all() -> Result<(), StepError> {
    check(set(&[Data::default(); 2]), Step::ClearCapabilities)
}

/// Whether `cap` is in the bounding set; `None` past the last capability the kernel knows.
pub fn in_bounding_set(cap: u32) -> Option<bool> {
    // SAFETY: PR_CAPBSET_READ takes an integer and touches no memory.
    match unsafe { libc::prctl(libc::PR_CAPBSET_READ, libc::c_ulong::from(cap), 0, 0, 0) } {
        rc if rc < 0 => None,
        rc => Some(rc == 1),
    }
}

/// The highest capability number this kernel knows (`/proc/sys/kernel/cap_last_cap`, found
/// without `/proc`: the bounding set answers `EINVAL` past it).
pub fn last_cap() -> io::Result<u32> {
    if in_bounding_set(0).is_none() {
        return Err(io::Error::last_os_error());
    }
    let mut last = 0;
    while last < 63 && in_bounding_set(last + 1).is_some() {
        last += 1;
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_capability_comes_back_and_only_its_thread_loses_it() {
        let had = effective(CAP_SYS_RESOURCE).unwrap();
        // On a thread of its own: the test's thread must keep its sets.
        std::thread::spawn(move || {
            assert_eq!(lower(CAP_SYS_RESOURCE).unwrap(), had);
            assert!(!effective(CAP_SYS_RESOURCE).unwrap());
            // Lowering again finds nothing to lower.
            assert!(!lower(CAP_SYS_RESOURCE).unwrap());
            if had {
                raise(CAP_SYS_RESOURCE).unwrap();
                assert!(effective(CAP_SYS_RESOURCE).unwrap());
                lower(CAP_SYS_RESOURCE).unwrap();
            }
        })
        .join()
        .unwrap();
        assert_eq!(effective(CAP_SYS_RESOURCE).unwrap(), had);
    }

    #[test]
    fn the_last_cap_found_by_probing_is_the_kernels() {
        let proc: u32 = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(last_cap().unwrap(), proc);
    }
}
