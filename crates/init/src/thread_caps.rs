//! Lowering and raising one capability in the calling thread's effective set.
//!
//! A file call made as the box user runs on a `berth-init` thread with its fsuid switched
//! to 1001 ([`crate::files::FsIdentity`]). That drops the filesystem capabilities, but not
//! `CAP_SYS_RESOURCE`, which is what lets ext4 write into the blocks a volume keeps for
//! root (`-m 1`). Those blocks are `berth-init`'s, so its journals still take writes when
//! the box user has filled the volume: the user's file calls must not spend them. Capability
//! sets are per thread (`capset` with pid 0), so lowering it here touches no other thread,
//! and the bit stays in the permitted set, so it can be raised again.

use std::io;

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

/// Removes `cap` (< 64) from this thread's effective set. Returns whether it was there
/// (so the caller knows to [`raise`] it again).
pub fn lower(cap: u32) -> io::Result<bool> {
    let mut data = get()?;
    let (word, bit) = split(cap);
    if data[word].effective & bit == 0 {
        return Ok(false);
    }
    data[word].effective &= !bit;
    set(&data)?;
    Ok(true)
}

/// Puts `cap` back into this thread's effective set (it must be permitted).
pub fn raise(cap: u32) -> io::Result<()> {
    let mut data = get()?;
    let (word, bit) = split(cap);
    data[word].effective |= bit;
    set(&data)
}

/// Whether `cap` is in this thread's effective set.
#[cfg(test)]
pub fn effective(cap: u32) -> io::Result<bool> {
    let data = get()?;
    let (word, bit) = split(cap);
    Ok(data[word].effective & bit != 0)
}

fn split(cap: u32) -> (usize, u32) {
    ((cap / 32) as usize, 1 << (cap % 32))
}

fn get() -> io::Result<[Data; 2]> {
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: header and data match the kernel's v3 layout (one header, two data structs).
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(data)
}

fn set(data: &[Data; 2]) -> io::Result<()> {
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: as in `get`; the kernel only reads `data`.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
}
