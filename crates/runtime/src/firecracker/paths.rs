//! Where the firecracker backend keeps a box's files: the qemu backend's layout
//! ([`VmPaths`]: volume, config disk, hybrid vsock and its egress socket, console log),
//! plus Firecracker's own API socket and pid file.
//!
//! ```text
//! <data>/boxes/<id>/volume.ext4
//! <data>/boxes/<id>/vm/                  0700, host root only
//!     firecracker.sock                   Firecracker's API
//!     vsock.sock, vsock.sock_2025        hybrid vsock: host → guest, guest → host egress
//!     console.log                        Firecracker's stdout/stderr: the serial console
//!     config.img, firecracker.pid
//! ```

use std::path::{Path, PathBuf};

use crate::qemu::VmPaths;

#[derive(Debug, Clone)]
pub struct FcPaths {
    vm: VmPaths,
}

impl FcPaths {
    pub fn at(box_dir: &Path) -> FcPaths {
        FcPaths {
            vm: VmPaths::at(box_dir),
        }
    }

    /// The paths both VM backends share.
    pub fn vm(&self) -> &VmPaths {
        &self.vm
    }

    pub fn api_socket(&self) -> PathBuf {
        self.vm.vm_dir().join("firecracker.sock")
    }

    pub fn pid_file(&self) -> PathBuf {
        self.vm.vm_dir().join("firecracker.pid")
    }

    /// What one boot leaves and the next must not find (the config disk holds the token).
    pub fn boot_files(&self) -> Vec<PathBuf> {
        vec![
            self.api_socket(),
            self.vm.vsock_socket(),
            self.vm.egress_socket(),
            self.vm.config_disk(),
            self.pid_file(),
        ]
    }
}
