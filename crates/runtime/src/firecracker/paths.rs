//! Where the firecracker backend keeps a box's files: the VM layout
//! ([`VmPaths`]: volume, config disk, hybrid vsock and its egress socket, console log),
//! plus Firecracker's own API socket and pid file. Under the jailer, Firecracker's sockets
//! move to `vm/run/`, which is bind-mounted at the same path inside its chroot (`jail.rs`).
//!
//! ```text
//! <data>/boxes/<id>/volume.ext4
//! <data>/boxes/<id>/vm/                  0700, host root only
//!     firecracker.sock                   Firecracker's API
//!     vsock.sock, vsock.sock_2025        hybrid vsock: host → guest, guest → host egress
//!     console.log                        Firecracker's stdout/stderr: the serial console
//!     config.img, firecracker.pid
//!     run/                               jailed only: the sockets above, owned by the jailer's uid
//! ```

use std::path::{Path, PathBuf};

use crate::vm::VmPaths;

#[derive(Debug, Clone)]
pub struct FcPaths {
    vm: VmPaths,
    jailed: bool,
}

impl FcPaths {
    pub fn at(box_dir: &Path) -> FcPaths {
        FcPaths {
            vm: VmPaths::at(box_dir),
            jailed: false,
        }
    }

    /// The paths of a box whose Firecracker runs under the jailer.
    pub fn jailed_at(box_dir: &Path) -> FcPaths {
        FcPaths {
            jailed: true,
            ..FcPaths::at(box_dir)
        }
    }

    pub fn is_jailed(&self) -> bool {
        self.jailed
    }

    /// The paths both VM backends share.
    pub fn vm(&self) -> &VmPaths {
        &self.vm
    }

    /// Where Firecracker's sockets are: the VM dir, or under the jailer `vm/run/`, the one
    /// directory its uid may write (the VM dir holds the boot token).
    pub fn sockets_dir(&self) -> PathBuf {
        if self.jailed {
            self.vm.vm_dir().join("run")
        } else {
            self.vm.vm_dir()
        }
    }

    pub fn api_socket(&self) -> PathBuf {
        self.sockets_dir().join("firecracker.sock")
    }

    /// The hybrid vsock socket (host → guest), named as the qemu backend names it.
    pub fn vsock_socket(&self) -> PathBuf {
        self.in_sockets_dir(&self.vm.vsock_socket())
    }

    /// Where Firecracker delivers the guest's connections to host port 2025.
    pub fn egress_socket(&self) -> PathBuf {
        self.in_sockets_dir(&self.vm.egress_socket())
    }

    fn in_sockets_dir(&self, socket: &Path) -> PathBuf {
        match socket.file_name() {
            Some(name) => self.sockets_dir().join(name),
            None => socket.to_path_buf(),
        }
    }

    pub fn pid_file(&self) -> PathBuf {
        self.vm.vm_dir().join("firecracker.pid")
    }

    /// What one boot leaves and the next must not find (the config disk holds the token).
    pub fn boot_files(&self) -> Vec<PathBuf> {
        vec![
            self.api_socket(),
            self.vsock_socket(),
            self.egress_socket(),
            self.vm.config_disk(),
            self.pid_file(),
        ]
    }
}
