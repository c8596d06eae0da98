//! Staging a boot's files into the jailer's chroot before it starts.
//!
//! The jailer creates `<base>/<exec name>/<id>/root`, copies Firecracker in, makes
//! `/dev/kvm` and `/dev/net/tun`, chowns the chroot root to its uid/gid, and pivots into it;
//! everything else Firecracker opens must already be there. Nothing is copied: an image is
//! hard-linked when the chroot is on its file system, else bind-mounted onto an empty file.
//! A hard link shares the inode, so shared images are never chowned (their mode must let the
//! jailer's uid read them); this boot's own files are chowned to it. The sockets directory
//! is bind-mounted at its host path, so socket paths (and Firecracker's `--api-sock`, by
//! which `process::find` recognises it) are the same inside and out.

use std::path::{Path, PathBuf};

use nix::mount::MsFlags;

use crate::error::io;
use crate::RuntimeError;

/// How the jailed Firecracker may use a staged file, and so how it is staged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A shared image (kernel, initramfs, rootfs, layer): linked or bound read-only, its
    /// owner and mode untouched; it must already be readable by the uid.
    Shared,
    /// This boot's own read-only file (the config disk): the uid's, 0400.
    Own,
    /// The box volume: the uid's, 0600, for the boot (back to berth's at cleanup).
    ReadWrite,
    /// The sockets directory: the uid's, 0700, bind-mounted at its host path.
    Sockets,
}

/// One host file or directory and where the jailed Firecracker finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    pub host: PathBuf,
    /// Absolute, as Firecracker sees it inside the chroot.
    pub inside: PathBuf,
    pub access: Access,
}

/// Everything one boot stages, and the in-chroot paths its API calls use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JailPlan {
    /// The chroot as the host sees it.
    pub chroot: PathBuf,
    pub kernel: Staged,
    pub initramfs: Staged,
    pub rootfs: Staged,
    pub volume: Staged,
    /// In the spec's order.
    pub layers: Vec<Staged>,
    pub config_disk: Staged,
    pub sockets: Staged,
}

/// The host files of one boot.
#[derive(Debug, Clone, Copy)]
pub struct BootFiles<'a> {
    pub kernel: &'a Path,
    pub initramfs: &'a Path,
    pub rootfs: &'a Path,
    pub volume: &'a Path,
    pub layers: &'a [PathBuf],
    pub config_disk: &'a Path,
    pub sockets_dir: &'a Path,
}

/// Which file goes where, and how (pure: no file system access).
pub fn plan(chroot: &Path, files: BootFiles<'_>) -> JailPlan {
    let at = |host: &Path, inside: String, access| Staged {
        host: host.to_path_buf(),
        inside: PathBuf::from(inside),
        access,
    };
    JailPlan {
        chroot: chroot.to_path_buf(),
        kernel: at(files.kernel, "/vmlinux".into(), Access::Shared),
        initramfs: at(files.initramfs, "/initrd.img".into(), Access::Shared),
        rootfs: at(files.rootfs, "/rootfs.img".into(), Access::Shared),
        volume: at(files.volume, "/volume.ext4".into(), Access::ReadWrite),
        layers: files
            .layers
            .iter()
            .enumerate()
            .map(|(i, layer)| at(layer, format!("/layer-{i}.img"), Access::Shared))
            .collect(),
        config_disk: at(files.config_disk, "/config.img".into(), Access::Own),
        sockets: Staged {
            host: files.sockets_dir.to_path_buf(),
            inside: files.sockets_dir.to_path_buf(),
            access: Access::Sockets,
        },
    }
}

impl JailPlan {
    pub fn entries(&self) -> Vec<&Staged> {
        let mut all = vec![&self.kernel, &self.initramfs, &self.rootfs, &self.volume];
        all.extend(&self.layers);
        all.extend([&self.config_disk, &self.sockets]);
        all
    }

    /// Where `staged` is on the host, in the chroot.
    pub fn host_side(&self, staged: &Staged) -> PathBuf {
        self.chroot
            .join(staged.inside.strip_prefix("/").unwrap_or(&staged.inside))
    }

    /// An in-chroot path as the API takes it.
    pub fn api_path(staged: &Staged) -> String {
        staged.inside.display().to_string()
    }
}

/// Stages every entry of `plan` for a Firecracker running as `uid`:`gid`. On error the
/// caller cleans up (`jail_clean::unjail`): what is staged so far is left for it.
pub fn stage(plan: &JailPlan, uid: u32, gid: u32) -> Result<(), RuntimeError> {
    crate::fs::mkdir_all(&plan.chroot)?;
    for staged in plan.entries() {
        let target = plan.host_side(staged);
        match staged.access {
            Access::Sockets => {
                crate::fs::mkdir_all(&staged.host)?;
                chown(&staged.host, uid, gid)?;
                crate::fs::set_mode(&staged.host, 0o700)?;
                crate::fs::mkdir_all(&target)?;
                bind(&staged.host, &target, false)?;
            }
            Access::Shared => {
                if !crate::vm::readable_by(&metadata(&staged.host)?, uid, gid) {
                    return Err(RuntimeError::Io {
                        action: "stage for the jailer (its uid/gid cannot read it; make it world-readable)",
                        path: staged.host.clone(),
                        source: std::io::ErrorKind::PermissionDenied.into(),
                    });
                }
                link_or_bind(&staged.host, &target, true)?;
            }
            Access::Own => {
                chown(&staged.host, uid, gid)?;
                crate::fs::set_mode(&staged.host, 0o400)?;
                link_or_bind(&staged.host, &target, true)?;
            }
            Access::ReadWrite => {
                chown(&staged.host, uid, gid)?;
                crate::fs::set_mode(&staged.host, 0o600)?;
                link_or_bind(&staged.host, &target, false)?;
            }
        }
    }
    Ok(())
}

fn metadata(path: &Path) -> Result<std::fs::Metadata, RuntimeError> {
    std::fs::metadata(path).map_err(io("stat", path))
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), RuntimeError> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).map_err(io("chown", path))
}

/// A hard link at `target`, or across file systems a bind mount onto an empty file there.
fn link_or_bind(host: &Path, target: &Path, read_only: bool) -> Result<(), RuntimeError> {
    if let Some(parent) = target.parent() {
        crate::fs::mkdir_all(parent)?;
    }
    crate::fs::remove_if_exists(target)?;
    match std::fs::hard_link(host, target) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EXDEV) => {
            std::fs::File::create(target).map_err(io("create the mount point", target))?;
            bind(host, target, read_only)
        }
        Err(e) => Err(io("hard-link into the jailer's chroot", target)(e)),
    }
}

/// Bind-mounts `host` onto `target`: nosuid, nodev, noexec, and read-only when asked (a
/// bind mount takes those flags only on a remount).
fn bind(host: &Path, target: &Path, read_only: bool) -> Result<(), RuntimeError> {
    let mount = |flags: MsFlags| {
        nix::mount::mount(Some(host), target, None::<&str>, flags, None::<&str>)
            .map_err(|e| io("bind-mount into the jailer's chroot", target)(e.into()))
    };
    mount(MsFlags::MS_BIND)?;
    let mut flags = MsFlags::MS_BIND
        | MsFlags::MS_REMOUNT
        | MsFlags::MS_NOSUID
        | MsFlags::MS_NODEV
        | MsFlags::MS_NOEXEC;
    if read_only {
        flags |= MsFlags::MS_RDONLY;
    }
    mount(flags)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::readable_by;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn the_plan_puts_each_file_at_the_chroot_root_and_the_sockets_at_their_host_path() {
        let layers = [
            PathBuf::from("/d/images/l0.ext4"),
            PathBuf::from("/d/images/l1.ext4"),
        ];
        let plan = plan(
            Path::new("/srv/jailer/firecracker/bx-a/root"),
            BootFiles {
                kernel: Path::new("/d/images/k/vmlinux"),
                initramfs: Path::new("/d/images/initrd.img"),
                rootfs: Path::new("/d/images/root.ext4"),
                volume: Path::new("/d/boxes/bx_a/volume.ext4"),
                layers: &layers,
                config_disk: Path::new("/d/boxes/bx_a/vm/config.img"),
                sockets_dir: Path::new("/d/boxes/bx_a/vm/run"),
            },
        );
        let got: Vec<(&str, &str, Access)> = plan
            .entries()
            .iter()
            .map(|s| {
                (
                    s.host.to_str().unwrap(),
                    s.inside.to_str().unwrap(),
                    s.access,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("/d/images/k/vmlinux", "/vmlinux", Access::Shared),
                ("/d/images/initrd.img", "/initrd.img", Access::Shared),
                ("/d/images/root.ext4", "/rootfs.img", Access::Shared),
                (
                    "/d/boxes/bx_a/volume.ext4",
                    "/volume.ext4",
                    Access::ReadWrite
                ),
                ("/d/images/l0.ext4", "/layer-0.img", Access::Shared),
                ("/d/images/l1.ext4", "/layer-1.img", Access::Shared),
                ("/d/boxes/bx_a/vm/config.img", "/config.img", Access::Own),
                (
                    "/d/boxes/bx_a/vm/run",
                    "/d/boxes/bx_a/vm/run",
                    Access::Sockets
                ),
            ]
        );
        // Only the volume is writable; only the sockets keep their host path.
        assert_eq!(
            plan.host_side(&plan.sockets),
            Path::new("/srv/jailer/firecracker/bx-a/root/d/boxes/bx_a/vm/run")
        );
        assert_eq!(
            plan.host_side(&plan.volume),
            Path::new("/srv/jailer/firecracker/bx-a/root/volume.ext4")
        );
        assert_eq!(JailPlan::api_path(&plan.config_disk), "/config.img");
    }

    #[test]
    fn readability_follows_owner_group_other() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        let meta = |mode| {
            crate::fs::set_mode(&file, mode).unwrap();
            std::fs::metadata(&file).unwrap()
        };
        let (owner, group) = {
            let m = std::fs::metadata(&file).unwrap();
            (m.uid(), m.gid())
        };
        let stranger = owner.wrapping_add(4242);
        let other_group = group.wrapping_add(4242);
        assert!(readable_by(&meta(0o644), stranger, other_group));
        assert!(!readable_by(&meta(0o640), stranger, other_group));
        assert!(readable_by(&meta(0o640), stranger, group));
        assert!(readable_by(&meta(0o400), owner, other_group));
        // The owner's bits decide for the owner, even when others may read.
        assert!(!readable_by(&meta(0o044), owner, group));
    }
}
