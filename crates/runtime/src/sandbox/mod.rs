//! The `sandbox` backend: OCI bundles run by runc (default), crun or runsc.
//!
//! Each box is one OCI container named by its box id, under berth's own runtime state dir
//! (`<data>/oci`). `start` (its steps in `boot.rs`, each timed by `phases.rs`) writes the bundle (`bundle.rs`) over the shared host rootfs
//! (`rootfs.rs`, with mount points for layers made by `mountpoints.rs`), or over the box's
//! read-only, idmapped mount of a rootfs image (`image_rootfs.rs`), and the box's run
//! dir (`volume.rs`), mounts the box's volume image (`volume_mount.rs`: the same ext4 image
//! a VM boots with, loop-mounted idmapped; `migrate.rs` turns an older directory volume
//! into one), runs it detached (`oci_cli.rs`) and waits for berth-init to answer on the
//! bind-mounted socket (`ready.rs`). Every stop unmounts the volume and the rootfs image;
//! `new` releases what a daemon that died with boxes up left mounted. `wait_exit` waits on
//! a pidfd of the container's init and says how it ended (`exit.rs`).
//!
//! Security choices worth knowing: box root is an unprivileged host uid (user namespace,
//! one 65536-id range per box); berth-init keeps only the capabilities it needs to drop
//! privileges for its children (no `CAP_SYS_ADMIN`, `CAP_NET_ADMIN`, `CAP_SYS_MODULE`, …);
//! the bundle's seccomp filter also refuses new namespaces (nested user namespaces would
//! hand box processes a full capability set over fresh kernel surface); and the host never
//! follows a link in the box-writable run dir (see `GuestClient`'s Unix connect).

mod boot;
mod bundle;
mod cgroup;
mod egress;
mod exit;
mod freezer;
mod host;
mod idmap_mount;
mod image_rootfs;
mod loop_device;
mod migrate;
mod mountpoints;
mod oci_cli;
mod paths;
mod phases;
mod ready;
mod rootfs;
mod seccomp;
mod stop;
mod volume;
mod volume_error;
mod volume_freeze;
mod volume_mount;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use berth_image::VolumeStock;
use berth_protocol::BoxId;

pub use bundle::{build as build_bundle, cgroups_path, BundleInput, INIT_CAPABILITIES};
pub use oci_cli::{OciCli, OciState, OciStatus};
pub use paths::{BoxPaths, Layout};
pub use volume_error::VolumeError;

use crate::error::{io, wrong_state};
use crate::{
    BootToken, Booted, BoxExit, BoxSpec, Capabilities, EgressListener, GuestAddr, GuestClient,
    IdMap, Runtime, RuntimeError, RuntimeStatus,
};

/// How to build a [`SandboxRuntime`].
#[derive(Debug, Clone)]
pub struct SandboxConfig {
    /// berth's data directory; the backend uses `boxes/`, `templates/` and `oci/` in it.
    pub data_dir: PathBuf,
    /// The OCI runtime: `runc` (default), `crun` or `runsc`, a name looked up in `PATH` or a path.
    pub oci_runtime: String,
    /// The static `berth-init` binary bound into every box (see [`crate::init_binary`]).
    pub init_bin: PathBuf,
}

/// Releases the volume and rootfs-image mounts (and so their loop devices) of every box
/// under `data_dir`, whatever the store thinks runs: for test guards and emergency cleanup,
/// once the boxes' containers are gone (a daemon killed with boxes up leaves them until the
/// next daemon reconciles). Returns the boxes whose volume was released.
pub fn release_all_mounts_blocking(data_dir: &std::path::Path) -> Vec<String> {
    let layout = Layout::new(data_dir);
    let none = std::collections::HashSet::new();
    image_rootfs::reconcile(&layout, &none);
    volume_mount::reconcile(&layout, &none)
}

/// The OCI runtime used unless configured otherwise.
pub const DEFAULT_OCI_RUNTIME: &str = "runc";

/// The grace `remove` gives a running box.
const REMOVE_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub struct SandboxRuntime {
    config: SandboxConfig,
    layout: Layout,
    oci: OciCli,
    volumes: Arc<VolumeStock>,
}

impl SandboxRuntime {
    /// Whether pause and resume go straight to the container cgroup's freezer: runc and
    /// crun keep their containers in `/berth/<id>` and read its freezer for their own
    /// state; another runtime (gVisor's runsc pauses its sandbox itself) is asked instead.
    fn freezes_directly(&self) -> bool {
        let program = std::path::Path::new(&self.config.oci_runtime).file_name();
        matches!(program.and_then(|p| p.to_str()), Some("runc" | "crun"))
    }

    /// Whether this host can run sandbox boxes at all: root, the OCI runtime `oci_runtime`,
    /// user namespaces, loop devices. Returns the OCI runtime's path. (Tests use it to skip with a reason.)
    pub fn check_host(oci_runtime: &str) -> Result<PathBuf, RuntimeError> {
        if !nix::unistd::geteuid().is_root() {
            return Err(RuntimeError::Missing {
                what: "root".into(),
                hint: "run berth up as root (rootless sandboxes are not supported yet)".into(),
            });
        }
        let program = host::find_program(oci_runtime).ok_or_else(|| RuntimeError::Missing {
            what: format!("the OCI runtime {oci_runtime:?}"),
            hint: format!("apt-get install {}", host::package_of(oci_runtime)),
        })?;
        host::check_user_namespaces()?;
        // Every box's volume is a loop-mounted ext4 image.
        if !std::path::Path::new(loop_device::LOOP_CONTROL).exists() {
            return Err(RuntimeError::Missing {
                what: format!("loop devices ({})", loop_device::LOOP_CONTROL),
                hint: "load the loop module (`modprobe loop`); in a container, pass the host's /dev/loop-control and /dev/loop* through".into(),
            });
        }
        Ok(program)
    }

    /// Checks the host ([`SandboxRuntime::check_host`], berth-init) and prepares the data dir.
    pub fn new(config: SandboxConfig) -> Result<SandboxRuntime, RuntimeError> {
        let program = Self::check_host(&config.oci_runtime)?;
        if !config.init_bin.is_file() {
            return Err(RuntimeError::Missing {
                what: format!("berth-init (looked for {})", config.init_bin.display()),
                hint: "build it with `make init`, or set BERTH_INIT_BIN to a static berth-init"
                    .into(),
            });
        }
        // A detached box init is reparented when the OCI runtime exits: to berth, so that
        // berth reaps it (`crate::process::reap_on_exit`), not to a host init that may never do so.
        // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes integer arguments only.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            tracing::warn!(error = %std::io::Error::last_os_error(), "cannot become the child subreaper; stopped boxes may linger as zombies");
        }
        let layout = Layout::new(&config.data_dir);
        for dir in [
            layout.data_dir().to_path_buf(),
            layout.oci_root(),
            layout.boxes_dir(),
        ] {
            crate::fs::mkdir_all(&dir)?;
        }
        // The boxes' mapped ids must traverse the data dir to reach their bind sources.
        for dir in [layout.data_dir().to_path_buf(), layout.boxes_dir()] {
            host::allow_traverse(&dir)?;
        }
        crate::fs::set_mode(&layout.oci_root(), 0o700)?;
        let stock = layout.volume_stock();
        let volumes = VolumeStock::open(&stock).map_err(io("prepare the volume stock", &stock))?;
        rootfs::ensure_host_rootfs(&layout.host_rootfs())?;
        let oci = OciCli::new(program, layout.oci_root());
        // A daemon killed with boxes up left their volumes mounted: release those whose box
        // no longer runs (a box still running keeps its mount).
        match oci.live_ids_blocking() {
            Ok(alive) => {
                volume_mount::reconcile(&layout, &alive);
                image_rootfs::reconcile(&layout, &alive);
            }
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "cannot list the containers; leftover volume mounts are not released")
            }
        }
        Ok(SandboxRuntime {
            config,
            layout,
            oci,
            volumes: Arc::new(volumes),
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// What this runtime was built from.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// The OCI runtime binary in use.
    pub fn oci_program(&self) -> &std::path::Path {
        self.oci.program()
    }

    /// The host pid of a box's berth-init, when it runs.
    pub async fn init_pid(&self, id: &BoxId) -> Result<Option<i32>, RuntimeError> {
        Ok(self
            .oci
            .state(id.as_str())
            .await?
            .map(|s| s.pid)
            .filter(|&pid| pid > 0))
    }

    /// Kills and deletes every container under this backend's state dir and releases their
    /// volumes, synchronously (for Drop guards and emergency shutdown). Returns the ids that
    /// could not be removed.
    pub fn cleanup_all_blocking(&self) -> Vec<String> {
        let left = self.oci.kill_all_blocking();
        let left_set = left.iter().cloned().collect();
        volume_mount::reconcile(&self.layout, &left_set);
        image_rootfs::reconcile(&self.layout, &left_set);
        left
    }

    /// Whether box `id`'s volume image is mounted on the host (only while it runs).
    pub fn volume_mounted(&self, id: &BoxId) -> bool {
        volume_mount::is_volume_mounted(&self.layout.box_paths(id))
    }

    /// Grows the volume of running box `id` to `disk_mib` without a restart (`resize2fs`
    /// online). A stopped box's volume grows at its next start instead
    /// ([`VolumeError::NotMounted`]); volumes never shrink.
    pub async fn grow_volume_online(&self, id: &BoxId, disk_mib: u64) -> Result<(), RuntimeError> {
        let paths = self.layout.box_paths(id);
        let owned = paths.clone();
        blocking(&paths, move || volume_mount::grow_online(&owned, disk_mib)).await
    }

    /// Whether box `id`'s rootfs image is mounted on the host (only while it runs).
    pub fn rootfs_image_mounted(&self, id: &BoxId) -> bool {
        image_rootfs::is_mounted_for(&self.layout.box_paths(id))
    }

    /// The loop device (`/dev/loopN` number) box `id`'s rootfs image is mounted from, while
    /// it runs on one.
    pub fn rootfs_loop_device(&self, id: &BoxId) -> Option<u32> {
        image_rootfs::loop_device_of(&self.layout.box_paths(id))
    }

    /// The loop devices (`/dev/loopN` numbers) bound to box `id`'s volume image.
    pub fn volume_loop_devices(&self, id: &BoxId) -> Vec<u32> {
        volume_mount::loop_devices_of(&self.layout.box_paths(id))
    }

    /// Which OCI runtime this is: `runc`, `crun` or `runsc`.
    pub fn oci_kind(&self) -> &'static str {
        let name = self
            .oci
            .program()
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("");
        match name {
            "runsc" => "runsc",
            "crun" => "crun",
            _ => "runc",
        }
    }

    /// Deletes a container that is no longer running, the run dir's leftovers, and
    /// unmounts its volume.
    async fn reap(&self, id: &BoxId) -> Result<(), RuntimeError> {
        match self.oci.delete_force(id.as_str()).await {
            Err(e) if !oci_cli::is_not_found(&e) => return Err(e),
            _ => {}
        }
        let paths = self.layout.box_paths(id);
        volume::clear_run_dir(&paths)?;
        release_image_rootfs(&paths).await?;
        release_volume(paths).await
    }
}

/// runc and crun freeze through the cgroup freezer, runsc through its own sentry; a
/// sandbox may share the host's `/usr` as its root.
/// No snapshot: a container's processes can only be saved by a checkpointer (CRIU, behind
/// `runc checkpoint`), and none works here ([`SNAPSHOT_BLOCKER`]).
pub const CAPABILITIES: Capabilities = Capabilities {
    pause: true,
    snapshot: false,
    host_rootfs: true,
};

/// Why a sandbox box cannot be snapshotted: its processes could only be saved by
/// `runc checkpoint`, which needs CRIU.
pub const SNAPSHOT_BLOCKER: &str = "snapshot: there is no working checkpointer for containers (runc checkpoint needs CRIU, which is not installed here and fails to dump a box on the kernels berth was tried on); pause keeps the box in memory instead";

#[async_trait]
impl Runtime for SandboxRuntime {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    async fn start(&self, spec: &BoxSpec) -> Result<Booted, RuntimeError> {
        let mut clock = phases::PhaseClock::start();
        match self.oci.state(spec.id.as_str()).await? {
            Some(s) if matches!(s.status, OciStatus::Running | OciStatus::Paused) => {
                return Err(RuntimeError::WrongState {
                    id: spec.id.to_string(),
                    operation: "start",
                    expected: "stopped",
                    actual: status_name(s.status),
                });
            }
            Some(_) => self.reap(&spec.id).await?,
            None => {}
        }
        let paths = self.layout.box_paths(&spec.id);
        crate::fs::mkdir_all(paths.dir())?;
        exit::begin_boot(&paths)?;
        clock.lap("prepare");
        match self.boot(spec, &paths, clock).await {
            Ok(booted) => Ok(booted),
            Err(e) => {
                // Nothing of a failed start stays running.
                let _ = self.oci.kill(spec.id.as_str(), "KILL", true).await;
                let _ = self.reap(&spec.id).await;
                Err(e)
            }
        }
    }

    async fn rebind_egress(
        &self,
        id: &BoxId,
        id_map: IdMap,
    ) -> Result<EgressListener, RuntimeError> {
        egress::bind(&self.layout.box_paths(id), id_map)
    }

    async fn stop(&self, id: &BoxId, grace: Duration) -> Result<(), RuntimeError> {
        let Some(state) = self.oci.state(id.as_str()).await? else {
            let paths = self.layout.box_paths(id);
            volume::clear_run_dir(&paths)?;
            release_image_rootfs(&paths).await?;
            return release_volume(paths).await;
        };
        if matches!(state.status, OciStatus::Paused | OciStatus::Running) {
            exit::mark_stop(&self.layout.box_paths(id));
        }
        match state.status {
            OciStatus::Paused => {
                // A frozen init cannot handle SIGTERM: thaw it first.
                self.oci.resume(id.as_str()).await?;
                self.terminate(id, state.pid, grace).await?;
            }
            OciStatus::Running => self.terminate(id, state.pid, grace).await?,
            OciStatus::Creating | OciStatus::Created | OciStatus::Stopped => {}
        }
        self.reap(id).await
    }

    async fn pause(&self, id: &BoxId) -> Result<(), RuntimeError> {
        if self.freezes_directly() {
            match freezer::frozen(id)? {
                Some(false) => {
                    let id = id.clone();
                    // The freeze is waited for by polling the cgroup: off the async threads.
                    return match crate::blocking::spawn_blocking(move || freezer::freeze(&id)).await
                    {
                        Ok(frozen) => frozen.map(drop),
                        Err(e) => std::panic::resume_unwind(e.into_panic()),
                    };
                }
                Some(true) => {
                    return Err(wrong_state(id, "pause", "running", RuntimeStatus::Paused))
                }
                None => {}
            }
        }
        let status = self.status(id).await?;
        if status != RuntimeStatus::Running {
            return Err(wrong_state(id, "pause", "running", status));
        }
        self.oci.pause(id.as_str()).await
    }

    async fn resume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        if self.freezes_directly() {
            match freezer::frozen(id)? {
                Some(true) => return freezer::thaw(id).map(drop),
                Some(false) => {
                    return Err(wrong_state(id, "resume", "paused", RuntimeStatus::Running))
                }
                None => {}
            }
        }
        let status = self.status(id).await?;
        if status != RuntimeStatus::Paused {
            return Err(wrong_state(id, "resume", "paused", status));
        }
        self.oci.resume(id.as_str()).await
    }

    async fn freeze_volume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let mount = self.layout.box_paths(id).volume_mount();
        let at = mount.clone();
        crate::blocking::spawn_blocking(move || volume_freeze::freeze(&at))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
            .map_err(|source| RuntimeError::Io {
                action: "freeze the volume mounted at",
                path: mount,
                source,
            })
    }

    async fn thaw_volume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let mount = self.layout.box_paths(id).volume_mount();
        volume_freeze::thaw(&mount).map_err(|source| RuntimeError::Io {
            action: "thaw the volume mounted at",
            path: mount,
            source,
        })
    }

    async fn status(&self, id: &BoxId) -> Result<RuntimeStatus, RuntimeError> {
        let Some(state) = self.oci.state(id.as_str()).await? else {
            return Ok(RuntimeStatus::Stopped);
        };
        match state.status {
            OciStatus::Running => Ok(RuntimeStatus::Running),
            OciStatus::Paused => Ok(RuntimeStatus::Paused),
            // Being created by a concurrent start: not up yet.
            OciStatus::Creating => Ok(RuntimeStatus::Stopped),
            OciStatus::Created | OciStatus::Stopped => {
                self.reap(id).await?;
                Ok(RuntimeStatus::Stopped)
            }
        }
    }

    /// Waits on a pidfd of the container's init (no polling), then says how it ended
    /// (`exit.rs`): clean for a stop or berth-init's own orderly end, else what happened.
    async fn wait_exit(&self, id: &BoxId) -> Result<BoxExit, RuntimeError> {
        let paths = self.layout.box_paths(id);
        let init = match self.oci.state(id.as_str()).await? {
            Some(s) if matches!(s.status, OciStatus::Running | OciStatus::Paused) => {
                exit::Init::find(s.pid, id)
            }
            _ => None,
        };
        if let Some(init) = init {
            init.wait(&paths).await?;
        }
        exit::settle(&paths).await;
        Ok(exit::classify(&paths))
    }

    async fn snapshot(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let _ = id;
        Err(RuntimeError::Unsupported {
            backend: "sandbox",
            operation: SNAPSHOT_BLOCKER,
        })
    }

    /// The container cgroup's charge (berth-init and the box's own cgroup inside it).
    async fn memory_held(&self, id: &BoxId) -> Result<Option<u64>, RuntimeError> {
        crate::vm::cgroup::memory_used(id)
    }

    fn channel(&self, id: &BoxId, token: &BootToken) -> GuestClient {
        GuestClient::new(
            GuestAddr::Unix(self.layout.box_paths(id).agent_socket()),
            token.clone(),
        )
    }

    async fn list(&self) -> Result<Vec<BoxId>, RuntimeError> {
        let states = self.oci.list().await?;
        Ok(states
            .into_iter()
            .filter_map(|s| s.id.parse::<BoxId>().ok())
            .collect())
    }

    async fn remove(&self, id: &BoxId) -> Result<(), RuntimeError> {
        self.stop(id, REMOVE_GRACE).await?;
        // Never delete through a mount: that would empty the image, not remove it.
        let paths = self.layout.box_paths(id);
        if volume_mount::is_volume_mounted(&paths) {
            return Err(RuntimeError::Io {
                action: "remove the box directory (its volume is still mounted)",
                path: paths.volume_mount(),
                source: std::io::ErrorKind::ResourceBusy.into(),
            });
        }
        if image_rootfs::is_mounted_for(&paths) {
            return Err(RuntimeError::Io {
                action: "remove the box directory (its rootfs image is still mounted)",
                path: paths.rootfs_mount(),
                source: std::io::ErrorKind::ResourceBusy.into(),
            });
        }
        crate::fs::remove_dir_all_if_exists(
            self.layout.box_paths(id).dir(),
            "remove the box directory",
        )
    }
}

/// [`image_rootfs::release`] off the async workers.
async fn release_image_rootfs(paths: &BoxPaths) -> Result<(), RuntimeError> {
    let owned = paths.clone();
    let target = paths.rootfs_mount();
    match crate::blocking::spawn_blocking(move || image_rootfs::release(&owned)).await {
        Ok(result) => Ok(result?),
        Err(source) => Err(VolumeError::Task {
            image: target,
            source,
        }
        .into()),
    }
}

/// [`volume_mount::release`] off the async workers (an unmount flushes the volume).
async fn release_volume(paths: BoxPaths) -> Result<(), RuntimeError> {
    let owned = paths.clone();
    blocking(&paths, move || volume_mount::release(&owned)).await
}

async fn blocking(
    paths: &BoxPaths,
    work: impl FnOnce() -> Result<(), VolumeError> + Send + 'static,
) -> Result<(), RuntimeError> {
    let image = paths.volume_image();
    match crate::blocking::spawn_blocking(work).await {
        Ok(result) => result.map_err(RuntimeError::from),
        Err(source) => Err(VolumeError::Task { image, source }.into()),
    }
}

fn status_name(status: OciStatus) -> &'static str {
    match status {
        OciStatus::Creating => "starting",
        OciStatus::Created => "created",
        OciStatus::Running => "running",
        OciStatus::Paused => "paused",
        OciStatus::Stopped => "stopped",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &std::path::Path, oci_runtime: &str, init_bin: PathBuf) -> SandboxConfig {
        SandboxConfig {
            data_dir: dir.join("data"),
            oci_runtime: oci_runtime.into(),
            init_bin,
        }
    }

    #[test]
    fn new_names_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        let init = dir.path().join("berth-init");
        std::fs::write(&init, "").unwrap();
        let err = SandboxRuntime::new(config(dir.path(), "no-such-oci-runtime", init.clone()))
            .unwrap_err();
        if !nix::unistd::geteuid().is_root() {
            assert!(matches!(err, RuntimeError::Missing { ref what, .. } if what == "root"));
            return;
        }
        assert!(
            matches!(err, RuntimeError::Missing { ref hint, .. } if hint.contains("apt-get install")),
            "{err}"
        );
        if host::find_program(DEFAULT_OCI_RUNTIME).is_none() {
            berth_testkit::skip("sandbox", "runc is not installed");
            return;
        }
        let err = SandboxRuntime::new(config(
            dir.path(),
            DEFAULT_OCI_RUNTIME,
            dir.path().join("none"),
        ))
        .unwrap_err();
        assert!(
            matches!(err, RuntimeError::Missing { ref what, .. } if what.contains("berth-init")),
            "{err}"
        );
        let runtime = SandboxRuntime::new(config(dir.path(), DEFAULT_OCI_RUNTIME, init)).unwrap();
        assert_eq!((runtime.name(), runtime.oci_kind()), ("sandbox", "runc"));
        assert!(runtime.layout().host_rootfs().join("etc/passwd").is_file());
        assert!(runtime.layout().oci_root().is_dir());
    }
}
