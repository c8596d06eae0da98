//! The `Runtime` trait and its backends.
//!
//! A runtime turns a [`BoxSpec`] into a running box whose `berth-init` answers on the guest
//! channel, and back. Every backend passes the same conformance suite
//! (`tests/conformance.rs`). Backends are honest: what one cannot do returns
//! [`RuntimeError::Unsupported`], never a silent `Ok`.

pub(crate) mod blocking;
pub mod error;
pub mod firecracker;
pub(crate) mod fs;
pub mod guest_client;
pub(crate) mod guest_etc;
pub mod layer;
pub(crate) mod process;
pub mod qemu;
pub mod sandbox;
pub mod spec;
pub(crate) mod vm;
pub mod volume_image;

use async_trait::async_trait;
use berth_protocol::BoxId;

pub use error::{error_chain, RuntimeError};
pub use guest_client::{
    EventStream, ExecStream, GuestAddr, GuestClient, GuestError, GuestStream, HandoffRefused,
    HandoffSender, NdjsonStream, PortHandoff, ProcessOutput, TerminalStream,
};
pub use layer::{LayerError, TargetError};
pub use spec::{BootToken, BoxSpec, EgressSetup, IdMap, Layer, Limits, Rootfs, DEFAULT_DISK_MIB};
pub use vm::VmRuntime;
pub use volume_image::volume_image;

/// The host end of a box's egress channel: each accepted stream is one outbound connection
/// of that box (and of no other), for the gateway to vet.
pub type EgressListener = tokio::net::UnixListener;

/// A box that has just booted.
#[derive(Debug)]
pub struct Booted {
    pub client: GuestClient,
    pub egress: EgressListener,
    /// How long each step of this start took, in order (empty where a backend does not
    /// measure them): the daemon records them in the box's `boot` event and `berth box show`.
    pub phases: BootPhases,
}

/// The steps of one start, in the order they ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct BootPhases(pub Vec<BootPhase>);

/// One step of a start: a short stable name (`volume_check`, `runc_create`, `init_mount`, …)
/// and how long it took.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BootPhase {
    pub name: String,
    pub micros: u64,
}

/// What a backend can do beyond start/stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    /// Freeze a running box in memory and thaw it.
    pub pause: bool,
    /// Save a running or paused box's memory to disk, end its VMM, and restore it with
    /// every process as it was ([`Runtime::snapshot`], [`Runtime::restore`]).
    pub snapshot: bool,
    /// Run a box on the host's own root (`Rootfs::Host`, the `host` template base). A VM
    /// boots rootfs images only.
    pub host_rootfs: bool,
}

/// Every backend berth has, by name, with what it can do: known without running it (a
/// daemon lists, and checks boxes against, runtimes it could not start).
pub const BACKENDS: [(&str, Capabilities); 3] = [
    ("sandbox", sandbox::CAPABILITIES),
    ("qemu", qemu::CAPABILITIES),
    ("firecracker", firecracker::CAPABILITIES),
];

/// What the backend called `name` can do; `None` for a name berth has no backend for.
pub fn backend_capabilities(name: &str) -> Option<Capabilities> {
    BACKENDS.iter().find(|(n, _)| *n == name).map(|(_, c)| *c)
}

/// What the backend sees of a box right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeStatus {
    /// Nothing of the box runs (never started, stopped, or exited).
    Stopped,
    Running,
    Paused,
}

/// How a boot of a box ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoxExit {
    /// berth-init powered the box off cleanly (a `stop`, or the box shut itself down).
    Clean,
    /// Any other end; the text says what happened, for a user, e.g. "QEMU was killed by
    /// signal 9 (SIGKILL)", "the guest kernel panicked: <console lines>", "the host's disk
    /// is full: ...".
    Crashed(String),
}

/// How often the default [`Runtime::wait_exit`] asks `status`.
pub const EXIT_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// One isolation backend (`sandbox`, later `qemu`, `firecracker`).
///
/// The backend owns `<boxes_dir>/<box id>/` (bundle, sockets, logs, the volume). All methods
/// are safe to call concurrently for different boxes; the caller serialises calls for one
/// box.
#[async_trait]
pub trait Runtime: Send + Sync + 'static {
    /// `sandbox`, `qemu`, `firecracker`.
    fn name(&self) -> &'static str;

    fn capabilities(&self) -> Capabilities;

    /// Boots the box and returns once its `berth-init` has answered `info` with the
    /// protocol version agreed. Creates the volume on the first start. A snapshot the box
    /// has is deleted first: a cold boot changes the volume under it, so it could never be
    /// restored safely. On error nothing of the box is left running.
    ///
    /// The box's egress channel is bound before the box boots (its harness may connect out
    /// at once) and handed over in [`Booted::egress`]: connections queue on it until the
    /// caller serves it, and fail once it is dropped.
    async fn start(&self, spec: &BoxSpec) -> Result<Booted, RuntimeError>;

    /// Binds the egress channel of a box that is already running again (after a daemon
    /// restart: the old listener died with the old daemon). Connections the box opens from
    /// now on arrive on the new listener.
    async fn rebind_egress(
        &self,
        id: &BoxId,
        id_map: IdMap,
    ) -> Result<EgressListener, RuntimeError>;

    /// Stops the box: SIGTERM to `berth-init`, SIGKILL after `grace`, and every process,
    /// mount and cgroup of the box is gone when this returns. The volume stays. Stopping a
    /// stopped box is `Ok`.
    async fn stop(&self, id: &BoxId, grace: std::time::Duration) -> Result<(), RuntimeError>;

    /// Freezes every process of a running box.
    async fn pause(&self, id: &BoxId) -> Result<(), RuntimeError>;

    /// Thaws a paused box.
    async fn resume(&self, id: &BoxId) -> Result<(), RuntimeError>;

    async fn status(&self, id: &BoxId) -> Result<RuntimeStatus, RuntimeError>;

    /// Resolves when the box's current boot has ended (at once when nothing of it runs),
    /// with how it ended. Cancel-safe (dropping the future stops waiting, nothing else).
    /// Unlike the other methods it may run while other calls for the same box do: the
    /// daemon keeps one waiting through each running boot.
    ///
    /// The default asks [`Runtime::status`] every [`EXIT_POLL`] and can only say
    /// [`BoxExit::Clean`]; a backend that knows why its box ended says so.
    async fn wait_exit(&self, id: &BoxId) -> Result<BoxExit, RuntimeError> {
        while self.status(id).await? != RuntimeStatus::Stopped {
            tokio::time::sleep(EXIT_POLL).await;
        }
        Ok(BoxExit::Clean)
    }

    /// A client for the guest channel of a running box, given the token minted for its boot.
    fn channel(&self, id: &BoxId, token: &BootToken) -> GuestClient;

    /// Saves a running or paused box's whole memory and device state next to its volume and
    /// ends its VMM, so the box holds no RAM. `RuntimeError::Unsupported` (with the reason)
    /// where this backend or host cannot; never a silent success.
    async fn snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let _ = id;
        Err(RuntimeError::Unsupported {
            backend: self.name(),
            operation: "snapshot",
        })
    }

    /// Starts the box from its snapshot with every process and its memory as they were.
    /// `spec.boot_token` is the new boot's token: it is handed to berth-init over the
    /// channel authenticated by `old_token`, and the guest clock is set. Egress is bound
    /// per `spec`. The snapshot is deleted once the box runs again. Err when there is none.
    async fn restore(&self, spec: &BoxSpec, old_token: &BootToken) -> Result<Booted, RuntimeError> {
        let _ = (spec, old_token);
        Err(RuntimeError::Unsupported {
            backend: self.name(),
            operation: "restore from a snapshot",
        })
    }

    /// Holds a running or paused box's volume still for a consistent copy: every write
    /// the box made is in its image file when this returns, and none lands (its writers
    /// wait) until [`Runtime::thaw_volume`]. `Unsupported` where the backend cannot: the
    /// caller pauses the box instead.
    async fn freeze_volume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let _ = id;
        Err(RuntimeError::Unsupported {
            backend: self.name(),
            operation: "freezing a volume",
        })
    }

    /// Lets the box's writes land again after [`Runtime::freeze_volume`]; `Ok` when its
    /// volume is not frozen.
    async fn thaw_volume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let _ = id;
        Ok(())
    }

    /// Bytes the box's snapshot takes on disk; `None` when it has none.
    async fn snapshot_size(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        let _ = id;
        Ok(None)
    }

    /// Deletes the box's snapshot (its next start is a cold boot). Ok when there is none.
    async fn discard_snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let _ = id;
        Ok(())
    }

    /// Host memory the box holds right now (its cgroup's usage, or the VMM's RSS); `None`
    /// when it holds none (stopped, snapshotted) or this cannot be measured.
    async fn memory_held(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        let _ = id;
        Ok(None)
    }

    /// Boxes this backend has something running or left behind for (for reconciliation
    /// after a daemon crash).
    async fn list(&self) -> Result<Vec<BoxId>, RuntimeError>;

    /// Stops the box if needed and deletes everything the backend holds for it, the volume
    /// included. Removing an unknown box is `Ok`.
    async fn remove(&self, id: &BoxId) -> Result<(), RuntimeError>;
}

/// Finds the static `berth-init` binary: `$BERTH_INIT_BIN`, else `berth-init` beside the
/// running executable.
pub fn init_binary() -> Result<std::path::PathBuf, RuntimeError> {
    let candidate = match std::env::var_os("BERTH_INIT_BIN") {
        Some(path) => std::path::PathBuf::from(path),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("berth-init")))
            .unwrap_or_else(|| "berth-init".into()),
    };
    if candidate.is_file() {
        Ok(candidate)
    } else {
        Err(RuntimeError::Missing {
            what: format!("berth-init (looked for {})", candidate.display()),
            hint: "build it with `make init`, or set BERTH_INIT_BIN to a static berth-init".into(),
        })
    }
}
