//! What the two VM backends (`qemu`, `firecracker`) share: their one `Runtime`
//! (`runtime.rs`, [`VmRuntime`]) over a small driver per VMM (`vmm.rs`), the box layout (`paths.rs`),
//! finding their boxes on disk, the checks before a boot, the disk images (`volume.rs`)
//! and config disk (`config_disk.rs`) of a boot, the egress listener (`egress.rs`), the
//! steps of a start that do not depend on the VMM (`start.rs`), the guest channel over
//! hybrid vsock, the wait for a ready berth-init (`ready.rs`), how a boot ended
//! (`exit.rs`), and the confinement of VMM processes (`jail.rs`, `cgroup.rs`,
//! `seccomp.rs`) and their logs (`log_ring.rs`).

pub(crate) mod cgroup;
pub(crate) mod config_disk;
pub(crate) mod egress;
pub(crate) mod exit;
pub(crate) mod jail;
pub(crate) mod log_ring;
mod paths;
mod ready;
pub(crate) mod runtime;
pub(crate) mod seccomp;
pub(crate) mod snapshot;
mod start;
pub(crate) mod vmm;
pub(crate) mod volume;

use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_protocol::guest::VSOCK_PORT;
use berth_protocol::BoxId;

pub(crate) use ready::{wait_ready, ReadyWait};
pub(crate) use start::{prepare_box, rootfs_image, start_or_clean};

pub use paths::{VmLayout, VmPaths};
pub use runtime::VmRuntime;

use crate::{BootToken, GuestAddr, GuestClient, IdMap, RuntimeError};

/// `$<env_var>` if set, else `name` on `PATH`; an executable file either way.
pub fn find_program(env_var: &str, name: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(env_var) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    let path_var =
        std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The box id whose host uid and gid a box's VMM processes run as: the last of the box's
/// own range (`IdMap`), which no process in a box runs as (it is `(uint16_t)-1`, "no id",
/// to 16-bit tools). So each box's VMMs have a uid no other box's VMM or sandbox shares.
pub const VMM_BOX_ID: u32 = IdMap::SIZE - 1;

/// The host uid and gid of a box's VMM processes.
pub(crate) fn vmm_owner(map: IdMap) -> (u32, u32) {
    let id = map.host_id(VMM_BOX_ID);
    (id, id)
}

/// Whether a file with `meta` is readable by `uid`/`gid` (without capabilities).
pub(crate) fn readable_by(meta: &std::fs::Metadata, uid: u32, gid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mode = meta.mode();
    if meta.uid() == uid {
        mode & 0o400 != 0
    } else if meta.gid() == gid {
        mode & 0o040 != 0
    } else {
        mode & 0o004 != 0
    }
}

/// A shared image (kernel, initramfs, rootfs, layer) a jailed VMM running as `owner`
/// opens must be readable by it: its owner and mode are never changed for one box.
pub(crate) fn check_readable_by(path: &Path, owner: (u32, u32)) -> Result<(), RuntimeError> {
    let meta = std::fs::metadata(path).map_err(crate::error::io("stat", path))?;
    if readable_by(&meta, owner.0, owner.1) {
        Ok(())
    } else {
        Err(RuntimeError::Io {
            action: "open for the VM's unprivileged VMM (its uid cannot read it; make it world-readable)",
            path: path.to_path_buf(),
            source: std::io::ErrorKind::PermissionDenied.into(),
        })
    }
}

/// Box dirs under `boxes/` that have a VM dir (whatever their backend).
pub(crate) fn box_dirs(layout: &VmLayout) -> Result<Vec<(BoxId, VmPaths)>, RuntimeError> {
    let dir = layout.boxes_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(crate::error::io("list", &dir)(e)),
    };
    Ok(entries
        .flatten()
        .filter_map(|e| {
            let id = e.file_name().to_str()?.parse::<BoxId>().ok()?;
            Some((id, VmPaths::at(&e.path())))
        })
        .filter(|(_, paths)| paths.vm_dir().is_dir())
        .collect())
}

/// The guest kernel and initramfs a backend boots must exist before it offers itself.
pub(crate) fn check_images(kernel: &Path, initramfs: &Path) -> Result<(), RuntimeError> {
    for (path, what) in [(kernel, "the guest kernel"), (initramfs, "the initramfs")] {
        if !path.is_file() {
            return Err(RuntimeError::Missing {
                what: format!("{what} ({})", path.display()),
                hint: "build the VM images with `berth image build`".into(),
            });
        }
    }
    Ok(())
}

/// Creates `dir` 0700 if missing (the VM dir holds the boot token and control sockets).
pub(crate) fn make_private_dir(dir: &Path) -> Result<(), RuntimeError> {
    use std::os::unix::fs::DirBuilderExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(crate::error::io("create", dir)(e))
        }
        _ => Ok(()),
    }
}

/// A client for berth-init behind the VM's hybrid vsock socket (both VMMs expose the same
/// one).
pub(crate) fn hybrid_client(vsock_socket: PathBuf, token: &BootToken) -> GuestClient {
    GuestClient::new(
        GuestAddr::HybridVsock {
            path: vsock_socket,
            port: VSOCK_PORT,
        },
        token.clone(),
    )
}

/// A VMM (or its helper) `program` that exited, or did not create `socket` within
/// `deadline`, as it started; with the last lines of its `log`.
pub(crate) fn socket_missing(
    program: &Path,
    died: bool,
    socket: &dyn std::fmt::Display,
    deadline: Duration,
    log: &Path,
) -> RuntimeError {
    RuntimeError::Backend {
        program: program.display().to_string(),
        operation: "start",
        status: if died {
            "exited".into()
        } else {
            format!("no {socket} after {} ms", deadline.as_millis())
        },
        stderr: crate::process::vmm::log_tail(log),
    }
}

/// A VMM process that outlived SIGKILL by `waited`.
pub(crate) fn still_alive(pid_file: &Path, pid: i32, waited: Duration) -> RuntimeError {
    RuntimeError::Backend {
        program: pid_file.display().to_string(),
        operation: "kill",
        status: format!(
            "pid {pid} still alive {} ms after SIGKILL",
            waited.as_millis()
        ),
        stderr: String::new(),
    }
}
