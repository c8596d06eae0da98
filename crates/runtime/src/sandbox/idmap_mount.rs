//! An ext4 (the box's volume; read-only, a rootfs image) mounted *idmapped* on the host: on
//! disk its files keep the box's own ids (0 and 1001, exactly as in a VM), while through
//! this mount (and every bind of it, such as the bundle's) they appear as the box's host
//! range, which is what the box's user namespace maps back to 0 and 1001.
//!
//! Built with the new mount API so the file system is never attached without its idmap:
//! `fsopen("ext4")` + `fsconfig` (`errors=remount-ro` over the superblock's own choice) →
//! `fsmount` (a detached mount, `nosuid,nodev`) →
//! `mount_setattr(MOUNT_ATTR_IDMAP)` with a user namespace carrying the box's `IdMap` →
//! `move_mount` onto the target. Needs Linux 5.12 (ext4 idmapped mounts).

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::volume_error::VolumeError;
use crate::IdMap;

// linux/mount.h.
const FSOPEN_CLOEXEC: libc::c_uint = 0x1;
const FSCONFIG_SET_FLAG: libc::c_uint = 0;
const FSCONFIG_SET_STRING: libc::c_uint = 1;
const FSCONFIG_CMD_CREATE: libc::c_uint = 6;
const FSMOUNT_CLOEXEC: libc::c_uint = 0x1;
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A user namespace whose only mapping is `map`'s range onto 0..65536 (uids and gids): an
/// fd to `/proc/<pid>/ns/user` of a short-lived child made in it, which keeps the
/// namespace alive after the child is gone.
pub fn user_namespace(map: IdMap) -> Result<OwnedFd, VolumeError> {
    let err = |source| VolumeError::UserNamespace { source };
    // SAFETY: a raw clone with no new stack behaves like fork (the child runs on a copy of
    // this stack). The child calls only `pause` and `_exit`, which are async-signal-safe,
    // so the locks other threads held at the clone do not matter.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::SIGCHLD) as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    if pid < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    if pid == 0 {
        loop {
            // SAFETY: pause only waits for a signal (the parent's SIGKILL).
            unsafe { libc::pause() };
        }
    }
    let pid = pid as libc::pid_t;
    let result = (|| {
        let line = format!("0 {} {}\n", map.host_base, IdMap::SIZE);
        for file in ["uid_map", "gid_map"] {
            std::fs::write(format!("/proc/{pid}/{file}"), &line).map_err(err)?;
        }
        let ns = std::fs::File::open(format!("/proc/{pid}/ns/user")).map_err(err)?;
        Ok(OwnedFd::from(ns))
    })();
    // SAFETY: kill and waitpid on the child made above, which nothing else waits for.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    result
}

/// How an idmapped ext4 is mounted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A box volume: read-write, with ext4's reserved blocks for host id `reserved_for`
    /// (the box's root: berth-init writes its journals on a volume its user filled, as it
    /// does as root in a VM; the on-disk default, host root, is no one in the box).
    ReadWrite { reserved_for: u32 },
    /// A rootfs image: `ro` and `noload` (never a journal replay, which would write), and
    /// the mount itself read-only.
    ReadOnly,
}

/// Mounts the ext4 on `device` at `target` (`nosuid,nodev,errors=remount-ro`), idmapped
/// through `userns`, as `access` says.
pub fn mount_idmapped(
    device: &Path,
    target: &Path,
    userns: &OwnedFd,
    access: Access,
) -> Result<(), VolumeError> {
    let fail = |step: &'static str, context: Option<&OwnedFd>| {
        let source = std::io::Error::last_os_error();
        VolumeError::Mount {
            device: device.into(),
            target: target.into(),
            step,
            kernel_says: context.and_then(kernel_messages),
            source,
        }
    };
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("a path has no NUL");
    let ext4 = CString::new("ext4").expect("no NUL");
    let source_key = CString::new("source").expect("no NUL");
    let empty = CString::new("").expect("no NUL");
    let device_c = c(device);
    let target_c = c(target);

    // SAFETY: fsopen with a NUL-terminated name; returns a new fd or -1.
    let fs = unsafe { libc::syscall(libc::SYS_fsopen, ext4.as_ptr(), FSOPEN_CLOEXEC) };
    if fs < 0 {
        return Err(fail("fsopen", None));
    }
    // SAFETY: a fresh fd that nothing else owns.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as RawFd) };
    // SAFETY: fsconfig on our fs context with NUL-terminated key and value.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_SET_STRING,
            source_key.as_ptr(),
            device_c.as_ptr(),
            0,
        )
    };
    if rc < 0 {
        return Err(fail("fsconfig source", Some(&fs)));
    }
    // Whatever the superblock asks for (a guest can set `errors=panic`): an error found in
    // the file system makes it read-only, never panics the host.
    let mut strings: Vec<(&str, String)> = vec![("errors", "remount-ro".into())];
    let mut flags: Vec<&str> = Vec::new();
    let mut mount_attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    match access {
        Access::ReadWrite { reserved_for } => {
            strings.push(("resuid", reserved_for.to_string()));
            strings.push(("resgid", reserved_for.to_string()));
        }
        Access::ReadOnly => {
            flags.extend(["ro", "noload"]);
            mount_attrs |= MOUNT_ATTR_RDONLY;
        }
    }
    for (key, value) in &strings {
        let key = CString::new(*key).expect("no NUL");
        let value = CString::new(value.as_str()).expect("digits");
        // SAFETY: fsconfig on our fs context with NUL-terminated key and value.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        };
        if rc < 0 {
            return Err(fail("fsconfig errors/resuid/resgid", Some(&fs)));
        }
    }
    for flag in flags {
        let key = CString::new(flag).expect("no NUL");
        // SAFETY: fsconfig SET_FLAG on our fs context with a NUL-terminated key, no value.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                FSCONFIG_SET_FLAG,
                key.as_ptr(),
                std::ptr::null::<libc::c_void>(),
                0,
            )
        };
        if rc < 0 {
            return Err(fail("fsconfig ro/noload", Some(&fs)));
        }
    }
    // SAFETY: fsconfig CMD_CREATE takes no key or value.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    };
    if rc < 0 {
        return Err(fail("fsconfig create", Some(&fs)));
    }
    // SAFETY: fsmount on the created context; returns a new fd of a detached mount.
    let mnt = unsafe {
        libc::syscall(
            libc::SYS_fsmount,
            fs.as_raw_fd(),
            FSMOUNT_CLOEXEC,
            mount_attrs,
        )
    };
    if mnt < 0 {
        return Err(fail("fsmount", Some(&fs)));
    }
    // SAFETY: a fresh fd that nothing else owns.
    let mnt = unsafe { OwnedFd::from_raw_fd(mnt as RawFd) };
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: mount_setattr reads `attr` (repr(C) struct mount_attr) of the given size.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            mnt.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 {
        return Err(fail("mount_setattr idmap", None));
    }
    // SAFETY: move_mount of our detached mount onto a NUL-terminated target path.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target_c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if rc < 0 {
        return Err(fail("move_mount", None));
    }
    Ok(())
}

/// What the kernel logged on a filesystem context (`e ext4: …` lines), if anything.
fn kernel_messages(fs: &OwnedFd) -> Option<String> {
    let mut file = std::fs::File::from(fs.try_clone().ok()?);
    let mut lines = Vec::new();
    let mut buf = [0u8; 512];
    // Each read returns one message; ENODATA when there are no more.
    for _ in 0..8 {
        match file.read(&mut buf) {
            Ok(n) if n > 0 => lines.push(String::from_utf8_lossy(&buf[..n]).trim().to_string()),
            _ => break,
        }
    }
    (!lines.is_empty()).then(|| lines.join("; "))
}

/// Unmounts `target` (nothing mounted: fine). A mount still busy (a process of the box
/// lingering in it) is detached lazily; the file system goes when its last user does.
pub fn unmount(target: &Path) -> Result<(), VolumeError> {
    let mut lazy = false;
    while is_mounted(target) {
        let flags = if lazy {
            libc::MNT_DETACH | libc::UMOUNT_NOFOLLOW
        } else {
            libc::UMOUNT_NOFOLLOW
        };
        match nix::mount::umount2(target, nix::mount::MntFlags::from_bits_truncate(flags)) {
            Ok(()) => {}
            Err(nix::errno::Errno::EINVAL) => return Ok(()),
            Err(nix::errno::Errno::EBUSY) if !lazy => {
                tracing::warn!(target = %target.display(), "volume busy at unmount; detaching it lazily");
                lazy = true;
            }
            Err(e) => {
                return Err(VolumeError::Unmount {
                    target: target.into(),
                    source: e.into(),
                })
            }
        }
    }
    Ok(())
}

/// Whether something is mounted exactly at `target` (per `/proc/self/mountinfo`).
pub fn is_mounted(target: &Path) -> bool {
    mount_points().iter().any(|p| p == target)
}

/// Every mount point of this mount namespace.
pub fn mount_points() -> Vec<PathBuf> {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape)
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && bytes.len() - i >= 4 {
            let oct = std::str::from_utf8(&bytes[i + 1..i + 4]).unwrap_or("");
            if let Ok(b) = u8::from_str_radix(oct, 8) {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(unescape(r"/a\040b\011c"), Path::new("/a b\tc"));
        assert_eq!(unescape(r"/plain"), Path::new("/plain"));
        assert_eq!(unescape(r"/end\04"), Path::new(r"/end\04"));
    }
}
