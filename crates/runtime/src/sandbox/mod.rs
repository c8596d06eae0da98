//! The `sandbox` backend: OCI bundles run by runc (default), crun or runsc.
//!
//! Each box is one OCI container named by its box id, under berth's own runtime state dir
//! (`<data>/oci`). `start` writes the bundle (`bundle.rs`) over the shared host rootfs
//! (`rootfs.rs`, with mount points for layers made by `mountpoints.rs`) and the box's volume
//! and run dir (`volume.rs`), runs it detached (`oci_cli.rs`) and waits
//! for berth-init to answer on the bind-mounted socket (`ready.rs`).
//!
//! Security choices worth knowing: box root is an unprivileged host uid (user namespace,
//! one 65536-id range per box); berth-init keeps only the capabilities it needs to drop
//! privileges for its children (no `CAP_SYS_ADMIN`, `CAP_NET_ADMIN`, `CAP_SYS_MODULE`, …);
//! the bundle's seccomp filter also refuses new namespaces (nested user namespaces would
//! hand box processes a full capability set over fresh kernel surface); and the host never
//! follows a link in the box-writable run dir (see `GuestClient`'s Unix connect).

mod bundle;
mod egress;
mod host;
mod mountpoints;
mod oci_cli;
mod paths;
mod ready;
mod rootfs;
mod seccomp;
mod stop;
mod volume;

use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use berth_protocol::BoxId;

pub use bundle::{build as build_bundle, cgroups_path, BundleInput, INIT_CAPABILITIES};
pub use oci_cli::{OciCli, OciState, OciStatus};
pub use paths::{BoxPaths, Layout};

use crate::error::wrong_state;
use crate::{
    BootToken, Booted, BoxSpec, Capabilities, EgressListener, GuestAddr, GuestClient, IdMap,
    Runtime, RuntimeError, RuntimeStatus,
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

/// The OCI runtime used unless configured otherwise.
pub const DEFAULT_OCI_RUNTIME: &str = "runc";

/// The grace `remove` gives a running box.
const REMOVE_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug)]
pub struct SandboxRuntime {
    config: SandboxConfig,
    layout: Layout,
    oci: OciCli,
}

impl SandboxRuntime {
    /// Whether this host can run sandbox boxes at all: root, the OCI runtime `oci_runtime`,
    /// user namespaces. Returns the OCI runtime's path. (Tests use it to skip with a reason.)
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
            rootfs::mkdir_all(&dir)?;
        }
        // The boxes' mapped ids must traverse the data dir to reach their bind sources.
        for dir in [layout.data_dir().to_path_buf(), layout.boxes_dir()] {
            host::allow_traverse(&dir)?;
        }
        rootfs::set_mode(&layout.oci_root(), 0o700)?;
        rootfs::ensure_host_rootfs(&layout.host_rootfs())?;
        let oci = OciCli::new(program, layout.oci_root());
        Ok(SandboxRuntime {
            config,
            layout,
            oci,
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
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

    /// Kills and deletes every container under this backend's state dir, synchronously
    /// (for Drop guards and emergency shutdown). Returns the ids that could not be removed.
    pub fn cleanup_all_blocking(&self) -> Vec<String> {
        self.oci.kill_all_blocking()
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

    async fn boot(&self, spec: &BoxSpec, paths: &BoxPaths) -> Result<Booted, RuntimeError> {
        let id = spec.id.as_str();
        if let crate::Rootfs::Image(_) = spec.rootfs {
            return Err(RuntimeError::Unsupported {
                backend: "sandbox",
                operation: "a rootfs image (the sandbox runs on the host's /usr)",
            });
        }
        let rootfs = self.layout.host_rootfs();
        rootfs::ensure_host_rootfs(&rootfs)?;
        // Checks the layers before anything of the box is touched.
        mountpoints::prepare(&rootfs, spec)?;
        volume::prepare_box_dirs(paths, spec.id_map)?;
        volume::write_token(paths, spec.id_map, &spec.boot_token)?;
        volume::write_harness(paths, spec.id_map, spec.harness.as_ref())?;
        volume::write_env(paths, spec.id_map, &spec.env)?;
        egress::write_etc(paths, &spec.egress)?;
        // Bound before the box runs: its harness may connect out during boot.
        let egress = egress::bind(paths, spec.id_map)?;
        bundle::write(&BundleInput {
            spec,
            rootfs: &rootfs,
            init_bin: &self.config.init_bin,
            paths,
        })?;
        let console = host::open_console(&paths.console_log())?;
        if let Err(e) = self
            .oci
            .run_detached(id, &paths.bundle(), &paths.pid_file(), console)
            .await
        {
            return Err(host::with_console(e, &paths.console_log()));
        }
        let pid = std::fs::read_to_string(paths.pid_file())
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        // The init becomes berth's child when the detached OCI runtime exits (berth is the
        // child subreaper, see `new`): without this it would stay a zombie.
        crate::process::reap_on_exit(pid);
        let client = self.channel(&spec.id, &spec.boot_token);
        ready::wait_ready(id, &client, pid, &paths.console_log()).await?;
        Ok(Booted { client, egress })
    }

    /// Deletes a container that is no longer running and the run dir's leftovers.
    async fn reap(&self, id: &BoxId) -> Result<(), RuntimeError> {
        match self.oci.delete_force(id.as_str()).await {
            Err(e) if !oci_cli::is_not_found(&e) => return Err(e),
            _ => {}
        }
        volume::clear_run_dir(&self.layout.box_paths(id))
    }
}

#[async_trait]
impl Runtime for SandboxRuntime {
    fn name(&self) -> &'static str {
        "sandbox"
    }

    fn capabilities(&self) -> Capabilities {
        // runc and crun freeze through the cgroup freezer, runsc through its own sentry.
        Capabilities {
            pause: true,
            snapshot: false,
        }
    }

    async fn start(&self, spec: &BoxSpec) -> Result<Booted, RuntimeError> {
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
        match self.boot(spec, &paths).await {
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
            return volume::clear_run_dir(&self.layout.box_paths(id));
        };
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
        let status = self.status(id).await?;
        if status != RuntimeStatus::Running {
            return Err(wrong_state(id, "pause", "running", status));
        }
        self.oci.pause(id.as_str()).await
    }

    async fn resume(&self, id: &BoxId) -> Result<(), RuntimeError> {
        let status = self.status(id).await?;
        if status != RuntimeStatus::Paused {
            return Err(wrong_state(id, "resume", "paused", status));
        }
        self.oci.resume(id.as_str()).await
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
        crate::fs::remove_dir_all_if_exists(
            self.layout.box_paths(id).dir(),
            "remove the box directory",
        )
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
            eprintln!("SKIPPED: runc is not installed");
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
