//! Where the VM backends keep a box's VM files (design: `<data>/boxes/<id>/vm/`).
//!
//! ```text
//! <data>/boxes/<id>/volume.ext4           the box's persistent disk (shared with nothing)
//! <data>/boxes/<id>/vm/                   0700, host root only
//!     run/                                0700, the box's VMM uid's for a boot: the sockets
//!         serial.sock                     qemu: the channel bridge's end of the guest's
//!                                         serial port (QEMU connects)
//!         migration.sock                  qemu: a snapshot's migration stream, while it flows
//!         vsock.sock                      hybrid vsock: host → guest (`CONNECT <port>\n`)
//!         vsock.sock_2025                 guest → host port 2025: the egress listener
//!         qmp.sock                        QEMU's QMP server (requests: pause, quit)
//!         qmp-events.sock                 a second QMP server, watched for a full host disk
//!     root/                               empty: each VMM mounts its jail's root on it
//!     console.log                         the serial console (kernel and berth-init)
//!     qemu.log, bridge.log                what the two processes print on stderr
//!     config.img                          this boot's config disk
//!     launch.json                         qemu: the argv and guest RAM this boot launched
//!                                         with (what a snapshot records and is bounded by)
//!     qemu.pid, bridge.pid                this boot's processes
//!     console.start                       where this boot's part of console.log begins
//!     vmm.exit                            how the VMM ended (`exited N` / `killed N`)
//!     stop-requested                      berth itself stopped this boot
//!     disk-full                           the boot ended on a full host disk (the reason)
//! ```
//!
//! The last four describe how a boot ended (`crate::vm::exit`): they outlive the boot and
//! are removed when the next one begins.

use std::path::{Path, PathBuf};

use berth_protocol::guest::EGRESS_VSOCK_PORT;
use berth_protocol::BoxId;

/// The data directory as the VM backends use it.
#[derive(Debug, Clone)]
pub struct VmLayout {
    data_dir: PathBuf,
}

impl VmLayout {
    pub fn new(data_dir: &Path) -> VmLayout {
        VmLayout {
            data_dir: data_dir.to_path_buf(),
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    pub fn boxes_dir(&self) -> PathBuf {
        self.data_dir.join("boxes")
    }

    pub fn box_paths(&self, id: &BoxId) -> VmPaths {
        VmPaths {
            box_dir: self.boxes_dir().join(id.as_str()),
        }
    }
}

/// The files of one box's VM.
#[derive(Debug, Clone)]
pub struct VmPaths {
    box_dir: PathBuf,
}

impl VmPaths {
    /// For a box dir given directly (tests, scans of `boxes/`).
    pub fn at(box_dir: &Path) -> VmPaths {
        VmPaths {
            box_dir: box_dir.to_path_buf(),
        }
    }

    pub fn box_dir(&self) -> &Path {
        &self.box_dir
    }

    pub fn volume(&self) -> PathBuf {
        self.box_dir.join(crate::volume_image::VOLUME_IMAGE_NAME)
    }

    pub fn vm_dir(&self) -> PathBuf {
        self.box_dir.join("vm")
    }

    /// The one directory a VM's jailed VMM processes may write besides the volume and the
    /// console: their sockets (the daemon, as root, reaches them at the same path).
    pub fn run_dir(&self) -> PathBuf {
        self.vm_dir().join("run")
    }

    /// An empty directory each VMM process mounts its jail's root on (`crate::vm::jail`).
    pub fn jail_root(&self) -> PathBuf {
        self.vm_dir().join("root")
    }

    /// The `qemu` channel bridge's socket for QEMU's end of the guest's serial port.
    pub fn serial_socket(&self) -> PathBuf {
        self.run_dir().join("serial.sock")
    }

    /// Where a `qemu` snapshot's migration stream flows between QEMU and the host.
    pub fn migration_socket(&self) -> PathBuf {
        self.run_dir().join("migration.sock")
    }

    /// The hybrid vsock socket: the guest channel connects here.
    pub fn vsock_socket(&self) -> PathBuf {
        self.run_dir().join("vsock.sock")
    }

    /// Where the guest's connections to host port `port` are delivered (by Firecracker, or
    /// by the `qemu` channel bridge).
    pub fn vsock_port_socket(&self, port: u32) -> PathBuf {
        self.run_dir().join(format!("vsock.sock_{port}"))
    }

    pub fn egress_socket(&self) -> PathBuf {
        self.vsock_port_socket(EGRESS_VSOCK_PORT)
    }

    pub fn qmp_socket(&self) -> PathBuf {
        self.run_dir().join("qmp.sock")
    }

    /// The second QMP server, only ever read for events (`qemu::disk_full`).
    pub fn qmp_events_socket(&self) -> PathBuf {
        self.run_dir().join("qmp-events.sock")
    }

    pub fn console_start(&self) -> PathBuf {
        self.vm_dir().join("console.start")
    }

    pub fn vmm_exit(&self) -> PathBuf {
        self.vm_dir().join("vmm.exit")
    }

    pub fn stop_requested(&self) -> PathBuf {
        self.vm_dir().join("stop-requested")
    }

    pub fn disk_full(&self) -> PathBuf {
        self.vm_dir().join("disk-full")
    }

    /// What says how the last boot ended; removed when the next begins.
    pub fn exit_files(&self) -> Vec<PathBuf> {
        vec![
            self.console_start(),
            self.vmm_exit(),
            self.stop_requested(),
            self.disk_full(),
        ]
    }

    pub fn console_log(&self) -> PathBuf {
        self.vm_dir().join("console.log")
    }

    pub fn qemu_log(&self) -> PathBuf {
        self.vm_dir().join("qemu.log")
    }

    /// What the `qemu` channel bridge (`berth-init bridge`) prints on stderr.
    pub fn bridge_log(&self) -> PathBuf {
        self.vm_dir().join("bridge.log")
    }

    pub fn config_disk(&self) -> PathBuf {
        self.vm_dir().join("config.img")
    }

    /// What a boot's QEMU was launched with (argv, guest RAM), recorded as it launched.
    pub fn launch_record(&self) -> PathBuf {
        self.vm_dir().join("launch.json")
    }

    pub fn qemu_pid(&self) -> PathBuf {
        self.vm_dir().join("qemu.pid")
    }

    pub fn bridge_pid(&self) -> PathBuf {
        self.vm_dir().join("bridge.pid")
    }

    /// What one boot leaves in the VM dir and the next boot must not find: sockets, pid
    /// files, the config disk (it holds the boot token). Logs stay.
    pub fn boot_files(&self) -> Vec<PathBuf> {
        vec![
            self.serial_socket(),
            self.migration_socket(),
            self.vsock_socket(),
            self.egress_socket(),
            self.qmp_socket(),
            self.qmp_events_socket(),
            self.config_disk(),
            self.launch_record(),
            self.qemu_pid(),
            self.bridge_pid(),
        ]
    }
}
