//! Where the sandbox backend keeps things under berth's data directory.
//!
//! ```text
//! <data>/oci/                         the OCI runtime's --root (its state dir)
//! <data>/templates/host/rootfs/       the shared read-only rootfs skeleton (Rootfs::Host)
//! <data>/boxes/<id>/bundle/config.json
//! <data>/boxes/<id>/run/              bound at /run/berth: token, harness.json, env.json,
//!                                     agent.sock, egress.sock
//! <data>/boxes/<id>/egress-bind/      host-only: where egress.sock is bound before its move
//! <data>/boxes/<id>/etc/{hosts,ca-certificates.crt}  bound read-only at /etc/hosts and
//!                                     /etc/ssl/certs/ca-certificates.crt
//! <data>/boxes/<id>/volume.ext4       the box's volume: the sparse ext4 image a VM boots
//!                                     with too, loop-mounted idmapped at mnt/ while it runs
//! <data>/boxes/<id>/mnt/{home,memory} bound at /home/user and /memory
//! <data>/boxes/<id>/mnt/agent         bound at /var/lib/berth: berth-init's own state
//! <data>/boxes/<id>/rootfs/           an image rootfs (Rootfs::Image), mounted read-only
//!                                     and idmapped there while the box runs: its OCI root
//! <data>/boxes/<id>/init.exit         how the box's last berth-init ended (wait_exit)
//! <data>/boxes/<id>/stop-requested    a stop of this boot was asked for (wait_exit)
//! <data>/boxes/<id>/volume/           an older box's directory volume, until it is
//!                                     migrated into volume.ext4 at its next start
//! <data>/boxes/<id>/console.log       stdout/stderr of the OCI runtime and berth-init
//! ```

use std::path::{Path, PathBuf};

use berth_protocol::guest::{AGENT_SOCKET, BOX_ENV_FILE, EGRESS_SOCKET, HARNESS_FILE, TOKEN_FILE};
use berth_protocol::BoxId;

/// The volume image's file name in a box dir (the name the VM backends use too).
pub use crate::volume_image::VOLUME_IMAGE_NAME;
/// Where the volume image is mounted in a box dir.
pub const VOLUME_MOUNT_NAME: &str = "mnt";
/// Where a box's rootfs image is mounted in its box dir.
pub const ROOTFS_MOUNT_NAME: &str = "rootfs";

/// The data directory's layout as the sandbox backend uses it.
#[derive(Debug, Clone)]
pub struct Layout {
    data_dir: PathBuf,
}

impl Layout {
    pub fn new(data_dir: &Path) -> Layout {
        Layout {
            data_dir: data_dir.to_path_buf(),
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The OCI runtime's `--root`: one per data dir, so separate data dirs never collide.
    pub fn oci_root(&self) -> PathBuf {
        self.data_dir.join("oci")
    }

    pub fn templates_dir(&self) -> PathBuf {
        self.data_dir.join("templates")
    }

    pub fn host_rootfs(&self) -> PathBuf {
        self.templates_dir().join("host").join("rootfs")
    }

    pub fn boxes_dir(&self) -> PathBuf {
        self.data_dir.join("boxes")
    }

    /// Spare empty volumes for new boxes ([`berth_image::VolumeStock`]): beside `boxes/`,
    /// on the same file system, so a spare is renamed into a box, not copied.
    pub fn volume_stock(&self) -> PathBuf {
        self.data_dir.join("volume-stock")
    }

    pub fn box_paths(&self, id: &BoxId) -> BoxPaths {
        BoxPaths {
            dir: self.boxes_dir().join(id.as_str()),
        }
    }
}

/// The files of one box.
#[derive(Debug, Clone)]
pub struct BoxPaths {
    dir: PathBuf,
}

impl BoxPaths {
    /// The files of the box whose dir is `dir`.
    pub fn at(dir: PathBuf) -> BoxPaths {
        BoxPaths { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn bundle(&self) -> PathBuf {
        self.dir.join("bundle")
    }

    pub fn config_json(&self) -> PathBuf {
        self.bundle().join("config.json")
    }

    pub fn pid_file(&self) -> PathBuf {
        self.bundle().join("init.pid")
    }

    /// Bound at `/run/berth` in the box.
    pub fn run_dir(&self) -> PathBuf {
        self.dir.join("run")
    }

    pub fn token_file(&self) -> PathBuf {
        self.run_dir().join(TOKEN_FILE)
    }

    pub fn harness_file(&self) -> PathBuf {
        self.run_dir().join(HARNESS_FILE)
    }

    pub fn agent_socket(&self) -> PathBuf {
        self.run_dir().join(AGENT_SOCKET)
    }

    pub fn env_file(&self) -> PathBuf {
        self.run_dir().join(BOX_ENV_FILE)
    }

    pub fn memory_layout_file(&self) -> PathBuf {
        self.run_dir()
            .join(berth_protocol::memory::MEMORY_LAYOUT_FILE)
    }

    pub fn services_file(&self) -> PathBuf {
        self.run_dir().join(berth_protocol::service::SERVICES_FILE)
    }

    /// The host end of the egress channel, as berth-init sees it (`/run/berth/egress.sock`).
    pub fn egress_socket(&self) -> PathBuf {
        self.run_dir().join(EGRESS_SOCKET)
    }

    /// Host-only (0700): the egress socket is bound and chowned here, then moved.
    pub fn egress_bind_dir(&self) -> PathBuf {
        self.dir.join("egress-bind")
    }

    /// Host-owned files bound read-only over the shared rootfs's `/etc`.
    pub fn etc_dir(&self) -> PathBuf {
        self.dir.join("etc")
    }

    pub fn hosts_file(&self) -> PathBuf {
        self.etc_dir().join("hosts")
    }

    pub fn ca_bundle(&self) -> PathBuf {
        self.etc_dir().join("ca-certificates.crt")
    }

    /// The box's volume image (the same file a VM backend boots the box with).
    pub fn volume_image(&self) -> PathBuf {
        self.dir.join(VOLUME_IMAGE_NAME)
    }

    /// Where the volume image is mounted while the box runs.
    pub fn volume_mount(&self) -> PathBuf {
        self.dir.join(VOLUME_MOUNT_NAME)
    }

    /// Where an image rootfs is mounted while the box runs (`image_rootfs.rs`).
    pub fn rootfs_mount(&self) -> PathBuf {
        self.dir.join(ROOTFS_MOUNT_NAME)
    }

    /// How the box's last berth-init ended, when this daemon reaped it.
    pub fn init_exit(&self) -> PathBuf {
        self.dir.join("init.exit")
    }

    /// Present when the current boot was asked to stop.
    pub fn stop_requested(&self) -> PathBuf {
        self.dir.join("stop-requested")
    }

    /// An older box's directory volume (`home/`, `memory/`, `agent/` owned by the box's host
    /// ids), migrated into the image once.
    pub fn legacy_volume_dir(&self) -> PathBuf {
        self.dir.join("volume")
    }

    pub fn home(&self) -> PathBuf {
        self.volume_mount().join("home")
    }

    pub fn memory(&self) -> PathBuf {
        self.volume_mount().join("memory")
    }

    /// Bound at `/var/lib/berth`: root-only, on the volume (journals of berth-init).
    pub fn agent_state(&self) -> PathBuf {
        self.volume_mount().join("agent")
    }

    pub fn console_log(&self) -> PathBuf {
        self.dir.join("console.log")
    }
}
