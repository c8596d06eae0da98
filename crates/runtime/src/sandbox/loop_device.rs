//! Loop devices for the box volumes (read-write) and rootfs images (read-only): taken from
//! `/dev/loop-control` and bound to an image with `LOOP_CONFIGURE` and `LO_FLAGS_AUTOCLEAR`,
//! so a device frees itself when its last user goes (the unmount, or the handle here
//! closing when no mount was made).
//! What a crashed daemon left is found again through `/sys/block/loopN/loop/backing_file`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::volume_error::VolumeError;

pub(crate) const LOOP_CONTROL: &str = "/dev/loop-control";
const SYS_BLOCK: &str = "/sys/block";

// linux/loop.h (not in the libc crate).
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_CAPACITY: libc::c_ulong = 0x4C07;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LO_FLAGS_READ_ONLY: u32 = 1;
const LO_FLAGS_AUTOCLEAR: u32 = 4;
const LO_NAME_SIZE: usize = 64;
const LO_KEY_SIZE: usize = 32;

/// How often a free device may be taken by someone else between `LOOP_CTL_GET_FREE` and
/// `LOOP_CONFIGURE` before giving up (each retry asks for a fresh free device).
const ATTACH_ATTEMPTS: u32 = 16;

#[repr(C)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; LO_NAME_SIZE],
    lo_crypt_name: [u8; LO_NAME_SIZE],
    lo_encrypt_key: [u8; LO_KEY_SIZE],
    lo_init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

/// A loop device bound to an image. The device stays bound while it is mounted; dropping
/// this handle before any mount frees it (autoclear).
#[derive(Debug)]
pub struct LoopDevice {
    number: u32,
    /// Held open until the mount holds the device itself.
    _open: File,
}

impl LoopDevice {
    pub fn path(&self) -> PathBuf {
        device_path(self.number)
    }

    pub fn number(&self) -> u32 {
        self.number
    }
}

/// `/dev/loopN`.
pub fn device_path(number: u32) -> PathBuf {
    PathBuf::from(format!("/dev/loop{number}"))
}

/// Binds a free loop device to `image` (read-write, autoclear).
pub fn attach(image: &Path) -> Result<LoopDevice, VolumeError> {
    attach_as(image, false)
}

/// Binds a free loop device to `image` read-only (autoclear): the device refuses writes
/// whatever is mounted from it, and the file is opened read-only, so a rootfs image shared
/// by many boxes is never written through any of them.
pub fn attach_read_only(image: &Path) -> Result<LoopDevice, VolumeError> {
    attach_as(image, true)
}

fn attach_as(image: &Path, read_only: bool) -> Result<LoopDevice, VolumeError> {
    let backing = std::fs::OpenOptions::new()
        .read(true)
        .write(!read_only)
        .custom_flags(libc::O_CLOEXEC)
        .open(image)
        .map_err(|source| VolumeError::Io {
            action: "open the image",
            path: image.into(),
            source,
        })?;
    let control = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(LOOP_CONTROL)
        .map_err(|source| VolumeError::LoopControl { source })?;
    for _ in 0..ATTACH_ATTEMPTS {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let number = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) };
        if number < 0 {
            return Err(VolumeError::LoopControl {
                source: std::io::Error::last_os_error(),
            });
        }
        let number = number as u32;
        let path = device_path(number);
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(file) => file,
            // Removed by another allocator's LOOP_CTL_REMOVE in between: ask again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(VolumeError::LoopAttach {
                    device: path,
                    image: image.into(),
                    source,
                })
            }
        };
        let config = loop_config(&backing, image, read_only);
        // SAFETY: LOOP_CONFIGURE reads a `struct loop_config`, which `config` is (repr(C),
        // linux/loop.h layout), alive for the call.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), LOOP_CONFIGURE, &config) };
        if rc == 0 {
            return Ok(LoopDevice {
                number,
                _open: file,
            });
        }
        let err = std::io::Error::last_os_error();
        // EBUSY: another process bound this device first.
        if err.raw_os_error() != Some(libc::EBUSY) {
            return Err(VolumeError::LoopAttach {
                device: path,
                image: image.into(),
                source: err,
            });
        }
    }
    Err(VolumeError::LoopBusy {
        image: image.into(),
        attempts: ATTACH_ATTEMPTS,
    })
}

fn loop_config(backing: &File, image: &Path, read_only: bool) -> LoopConfig {
    let mut name = [0u8; LO_NAME_SIZE];
    // Informational only (the full path is in sysfs): the tail that fits, NUL-terminated.
    let bytes = image.as_os_str().as_encoded_bytes();
    let tail = &bytes[bytes.len().saturating_sub(LO_NAME_SIZE - 1)..];
    name[..tail.len()].copy_from_slice(tail);
    LoopConfig {
        fd: backing.as_raw_fd() as u32,
        block_size: 0,
        info: LoopInfo64 {
            lo_device: 0,
            lo_inode: 0,
            lo_rdevice: 0,
            lo_offset: 0,
            lo_sizelimit: 0,
            lo_number: 0,
            lo_encrypt_type: 0,
            lo_encrypt_key_size: 0,
            lo_flags: if read_only {
                LO_FLAGS_AUTOCLEAR | LO_FLAGS_READ_ONLY
            } else {
                LO_FLAGS_AUTOCLEAR
            },
            lo_file_name: name,
            lo_crypt_name: [0; LO_NAME_SIZE],
            lo_encrypt_key: [0; LO_KEY_SIZE],
            lo_init: [0; 2],
        },
        reserved: [0; 8],
    }
}

/// Every bound loop device and its backing file, as sysfs names it (a deleted file loses
/// its ` (deleted)` suffix here).
pub fn bound_devices() -> Vec<(u32, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(SYS_BLOCK) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(number) = name
            .to_str()
            .and_then(|n| n.strip_prefix("loop"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // Only a bound device has the file.
        let Ok(backing) = std::fs::read_to_string(entry.path().join("loop/backing_file")) else {
            continue;
        };
        let backing = backing.trim_end_matches('\n');
        let backing = backing.strip_suffix(" (deleted)").unwrap_or(backing);
        out.push((number, PathBuf::from(backing)));
    }
    out.sort();
    out
}

/// The bound loop devices whose backing file is `image`.
pub fn devices_of(image: &Path) -> Vec<u32> {
    bound_devices()
        .into_iter()
        .filter(|(_, backing)| backing == image)
        .map(|(n, _)| n)
        .collect()
}

/// Unbinds loop device `number` (when it is still mounted, the kernel marks it to clear
/// on its last close instead). A device already gone is fine.
pub fn detach(number: u32) -> Result<(), VolumeError> {
    let path = device_path(number);
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(VolumeError::Io {
                action: "open the loop device",
                path,
                source,
            })
        }
    };
    // SAFETY: LOOP_CLR_FD takes no argument.
    if unsafe { libc::ioctl(file.as_raw_fd(), LOOP_CLR_FD, 0) } == 0 {
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        // ENXIO: not bound (any more).
        Some(libc::ENXIO) => Ok(()),
        _ => Err(VolumeError::Io {
            action: "detach the loop device",
            path,
            source: err,
        }),
    }
}

/// Makes loop device `number` take its backing file's new size (after the file grew).
pub fn refresh_capacity(number: u32) -> Result<(), VolumeError> {
    let path = device_path(number);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(&path)
        .map_err(|source| VolumeError::Io {
            action: "open the loop device",
            path: path.clone(),
            source,
        })?;
    // SAFETY: LOOP_SET_CAPACITY takes no argument.
    if unsafe { libc::ioctl(file.as_raw_fd(), LOOP_SET_CAPACITY, 0) } != 0 {
        return Err(VolumeError::Io {
            action: "refresh the capacity of",
            path,
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_has_the_kernel_layout() {
        // linux/loop.h: loop_info64 is 232 bytes, loop_config 304.
        assert_eq!(std::mem::size_of::<LoopInfo64>(), 232);
        assert_eq!(std::mem::size_of::<LoopConfig>(), 304);
    }

    #[test]
    fn attach_binds_and_autoclear_frees_on_close() {
        if !nix::unistd::geteuid().is_root() || !Path::new(LOOP_CONTROL).exists() {
            berth_testkit::skip("loop", format!("loop devices need root and {LOOP_CONTROL}"));
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("volume.ext4");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(4 << 20)
            .unwrap();
        let device = attach(&image).unwrap();
        assert_eq!(devices_of(&image), vec![device.number()]);
        assert!(bound_devices().contains(&(device.number(), image.clone())));
        // No mount holds it: closing the last handle frees it.
        drop(device);
        assert!(devices_of(&image).is_empty());
        // An explicit detach of a bound device works too.
        let device = attach(&image).unwrap();
        let number = device.number();
        detach(number).unwrap();
        drop(device);
        assert!(devices_of(&image).is_empty());
        detach(number).unwrap();
        assert!(matches!(
            attach(&dir.path().join("missing")),
            Err(VolumeError::Io { .. })
        ));
    }
}
