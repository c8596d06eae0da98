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
//! <data>/boxes/<id>/volume/{home,memory}  bound at /home/user and /memory
//! <data>/boxes/<id>/volume/agent      bound at /var/lib/berth: berth-init's own state
//! <data>/boxes/<id>/console.log       stdout/stderr of the OCI runtime and berth-init
//! ```

use std::path::{Path, PathBuf};

use berth_protocol::guest::{AGENT_SOCKET, BOX_ENV_FILE, EGRESS_SOCKET, HARNESS_FILE, TOKEN_FILE};
use berth_protocol::BoxId;

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

    pub fn volume(&self) -> PathBuf {
        self.dir.join("volume")
    }

    pub fn home(&self) -> PathBuf {
        self.volume().join("home")
    }

    pub fn memory(&self) -> PathBuf {
        self.volume().join("memory")
    }

    /// Bound at `/var/lib/berth`: root-only, on the volume (journals of berth-init).
    pub fn agent_state(&self) -> PathBuf {
        self.volume().join("agent")
    }

    pub fn console_log(&self) -> PathBuf {
        self.dir.join("console.log")
    }
}
