//! One backend per test (`sandbox`, `qemu` or `firecracker`) on its own data dir: box
//! specs that backend can boot, and the host-side probes of what a box leaves behind. A
//! backend this host cannot run is skipped with the reason ([`berth_testkit::skip`], the
//! part named after the backend).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_protocol::BoxId;
use berth_runtime::firecracker::{
    FcPaths, FirecrackerConfig, FirecrackerRuntime, DEFAULT_FIRECRACKER,
};
use berth_runtime::qemu::{QemuConfig, QemuRuntime};
use berth_runtime::sandbox::{SandboxConfig, SandboxRuntime};
use berth_runtime::{BoxSpec, Limits, Runtime, RuntimeError};

use super::images::{images, vm_binaries, Images};

/// Guest RAM of a VM box whose spec keeps the default limits (tests boot several VMs on
/// a small machine; the default is larger).
pub const VM_MEMORY_MIB: u64 = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sandbox,
    Qemu,
    Firecracker,
}

impl Backend {
    /// The backend's part in `BERTH_REQUIRE` (crates/testkit).
    pub fn part(self) -> &'static str {
        match self {
            Backend::Sandbox => "sandbox",
            Backend::Qemu => "qemu",
            Backend::Firecracker => "firecracker",
        }
    }
}

/// The concrete backend behind `Fixture::runtime`, for backend-specific probes.
pub enum Kind {
    Sandbox(Arc<SandboxRuntime>),
    Qemu {
        runtime: Arc<QemuRuntime>,
        images: Images,
        _slot: super::vm::VmSlot,
    },
    Firecracker {
        runtime: Arc<FirecrackerRuntime>,
        images: Images,
        _slot: super::vm::VmSlot,
    },
}

/// One backend for one test. Dropping it (also on panic) kills (and for the sandbox,
/// deletes) every box it started and removes its data dir.
pub struct Fixture {
    pub runtime: Arc<dyn Runtime>,
    pub kind: Kind,
    pub dir: tempfile::TempDir,
    /// The sandbox's boxes boot this rootfs image instead of the host rootfs
    /// ([`Fixture::on_rootfs_image`]).
    pub sandbox_image: Option<PathBuf>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let left = match &self.kind {
            Kind::Sandbox(sandbox) => sandbox.cleanup_all_blocking(),
            Kind::Qemu { runtime, .. } => runtime
                .kill_all_blocking()
                .iter()
                .map(|id| id.to_string())
                .collect(),
            Kind::Firecracker { runtime, .. } => runtime
                .kill_all_blocking()
                .iter()
                .map(|id| id.to_string())
                .collect(),
        };
        if !left.is_empty() {
            eprintln!("cleanup could not remove: {left:?}");
        }
    }
}

impl Fixture {
    /// `backend` on a fresh data dir, or `None` after printing why the test is skipped.
    pub async fn new(backend: Backend) -> Option<Fixture> {
        // Short: socket paths under it must fit in a sockaddr_un (108 bytes).
        let short = match backend {
            Backend::Sandbox => "berth-cs-",
            Backend::Qemu => "berth-cq-",
            Backend::Firecracker => "berth-cf-",
        };
        let dir = tempfile::Builder::new().prefix(short).tempdir().unwrap();
        let skip = |why: &dyn std::fmt::Display| {
            berth_testkit::skip(backend.part(), why);
            None
        };
        match backend {
            Backend::Sandbox => {
                if !nix::unistd::geteuid().is_root() {
                    return skip(&"the sandbox backend needs root");
                }
                let init_bin = match berth_runtime::init_binary() {
                    Ok(path) => path,
                    Err(e) => return skip(&e),
                };
                let config = SandboxConfig {
                    data_dir: dir.path().to_path_buf(),
                    oci_runtime: std::env::var("BERTH_OCI_RUNTIME")
                        .unwrap_or_else(|_| "runc".into()),
                    init_bin,
                };
                match SandboxRuntime::new(config) {
                    Ok(sandbox) => {
                        let sandbox = Arc::new(sandbox);
                        Some(Fixture {
                            runtime: sandbox.clone(),
                            kind: Kind::Sandbox(sandbox),
                            dir,
                            sandbox_image: None,
                        })
                    }
                    Err(e @ RuntimeError::Missing { .. }) => skip(&e),
                    Err(e) => panic!("SandboxRuntime::new: {e}"),
                }
            }
            Backend::Qemu => {
                if let Err(why) = vm_binaries() {
                    return skip(&why);
                }
                let images = match tokio::task::spawn_blocking(images).await.unwrap() {
                    Ok(images) => images,
                    Err(why) => return skip(&why),
                };
                let slot = super::vm::vm_slot().await;
                let config = QemuConfig::new(dir.path(), &images.kernel, &images.initramfs);
                match QemuRuntime::new(config).await {
                    Ok(runtime) => {
                        let runtime = Arc::new(runtime);
                        Some(Fixture {
                            runtime: runtime.clone(),
                            kind: Kind::Qemu {
                                runtime,
                                images,
                                _slot: slot,
                            },
                            dir,
                            sandbox_image: None,
                        })
                    }
                    Err(e @ RuntimeError::Missing { .. }) => skip(&e),
                    Err(e) => panic!("QemuRuntime::new: {e}"),
                }
            }
            Backend::Firecracker => {
                // Cheapest first: no binary, then no images, then no KVM (`new` boots a
                // probe guest).
                if berth_runtime::qemu::find_program("BERTH_FIRECRACKER", DEFAULT_FIRECRACKER)
                    .is_none()
                {
                    return skip(&format!(
                        "no {DEFAULT_FIRECRACKER} binary (install a release, or set BERTH_FIRECRACKER)"
                    ));
                }
                let images = match tokio::task::spawn_blocking(images).await.unwrap() {
                    Ok(images) => images,
                    Err(why) => return skip(&why),
                };
                let vmlinux = match &images.vmlinux {
                    Ok(vmlinux) => vmlinux.clone(),
                    Err(why) => return skip(why),
                };
                let slot = super::vm::vm_slot().await;
                let config = FirecrackerConfig::new(dir.path(), &vmlinux, &images.initramfs);
                match FirecrackerRuntime::new(config).await {
                    Ok(runtime) => {
                        let runtime = Arc::new(runtime);
                        Some(Fixture {
                            runtime: runtime.clone(),
                            kind: Kind::Firecracker {
                                runtime,
                                images,
                                _slot: slot,
                            },
                            dir,
                            sandbox_image: None,
                        })
                    }
                    // No KVM that runs a guest, or a jailer it lacks.
                    Err(e @ RuntimeError::Missing { .. }) => skip(&e),
                    Err(e) => panic!("FirecrackerRuntime::new: {e}"),
                }
            }
        }
    }

    /// The sandbox fixture with its boxes on the test's `minimal` rootfs image (the one the
    /// VMs boot), or `None` after printing why the test is skipped. Other backends boot
    /// that image already.
    pub async fn on_rootfs_image(mut self) -> Option<Fixture> {
        if let Kind::Sandbox(_) = self.kind {
            match tokio::task::spawn_blocking(images).await.unwrap() {
                Ok(images) => self.sandbox_image = Some(images.rootfs),
                Err(why) => {
                    berth_testkit::skip("qemu", format!("the sandbox on a rootfs image: {why}"));
                    return None;
                }
            }
        }
        Some(self)
    }

    /// Whether the box's `/` is a read-only image (a VM, or the sandbox on one), where no
    /// mount point can be made at start.
    pub fn rootfs_is_image(&self) -> bool {
        self.sandbox_image.is_some() || self.is_vm()
    }

    pub fn backend(&self) -> Backend {
        match self.kind {
            Kind::Sandbox(_) => Backend::Sandbox,
            Kind::Qemu { .. } => Backend::Qemu,
            Kind::Firecracker { .. } => Backend::Firecracker,
        }
    }

    /// Whether boxes are VMs (their own kernel, the guest's cgroups and OOM killer).
    pub fn is_vm(&self) -> bool {
        self.backend() != Backend::Sandbox
    }

    pub fn sandbox(&self) -> Option<&SandboxRuntime> {
        match &self.kind {
            Kind::Sandbox(sandbox) => Some(sandbox),
            _ => None,
        }
    }

    pub fn qemu(&self) -> Option<&QemuRuntime> {
        match &self.kind {
            Kind::Qemu { runtime, .. } => Some(runtime),
            _ => None,
        }
    }

    /// A new box this backend can boot: a VM gets the test rootfs image, a small volume,
    /// and [`VM_MEMORY_MIB`] unless `limits` asks for less.
    pub fn spec(&self, limits: Limits) -> BoxSpec {
        match &self.kind {
            Kind::Qemu { images, .. } | Kind::Firecracker { images, .. } => super::vm::vm_spec(
                images,
                Limits {
                    memory_mib: limits.memory_mib.min(VM_MEMORY_MIB),
                    ..limits
                },
            ),
            Kind::Sandbox(_) => {
                let mut spec = super::new_spec(limits);
                if let Some(image) = &self.sandbox_image {
                    spec.rootfs = berth_runtime::Rootfs::Image(image.clone());
                }
                spec
            }
        }
    }

    /// How long a condition on a box may take: a TCG guest on a busy host is slow.
    pub fn patience(&self) -> Duration {
        match self.kind {
            Kind::Sandbox(_) => Duration::from_secs(15),
            Kind::Qemu { .. } | Kind::Firecracker { .. } => Duration::from_secs(60),
        }
    }

    /// Live host processes of the box: for the sandbox those in its id range, for a VM its
    /// VMM (and QEMU's channel bridge) and anything else started on its files.
    pub fn box_processes(&self, spec: &BoxSpec) -> Vec<i32> {
        match &self.kind {
            Kind::Sandbox(_) => super::host_pids_in_range(spec.id_map),
            Kind::Qemu { .. } | Kind::Firecracker { .. } => {
                let dir = self.box_dir(&spec.id);
                super::host_pids_mentioning(&dir.to_string_lossy())
            }
        }
    }

    /// Host traces of a stopped box that must be gone: sockets, pid files, the config
    /// disk; for the sandbox also its cgroups and mounts.
    pub fn traces_left(&self, id: &BoxId) -> Vec<String> {
        let mut left: Vec<PathBuf> = Vec::new();
        let mut mounts = Vec::new();
        match &self.kind {
            Kind::Sandbox(sandbox) => {
                left.push(sandbox.layout().box_paths(id).agent_socket());
                left.extend(super::cgroup_dirs(id));
                let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
                mounts.extend(
                    table
                        .lines()
                        .filter(|l| l.contains(id.as_str()))
                        .map(|l| format!("mount: {l}")),
                );
                mounts.extend(
                    sandbox
                        .volume_loop_devices(id)
                        .iter()
                        .map(|n| format!("loop device: /dev/loop{n}")),
                );
            }
            Kind::Qemu { runtime, .. } => {
                left.extend(super::vm::qemu_boot_files_left(
                    &runtime.layout().box_paths(id),
                ));
            }
            Kind::Firecracker { .. } => {
                // Jailed or not: the files of either layout.
                let dir = self.box_dir(id);
                for paths in [FcPaths::at(&dir), FcPaths::jailed_at(&dir)] {
                    left.extend(paths.boot_files());
                }
            }
        }
        left.into_iter()
            .filter(|p| p.exists())
            .map(|p| p.display().to_string())
            .chain(mounts)
            .collect()
    }

    /// The box's directory under the data dir.
    pub fn box_dir(&self, id: &BoxId) -> PathBuf {
        match &self.kind {
            Kind::Sandbox(sandbox) => sandbox.layout().box_paths(id).dir().to_path_buf(),
            Kind::Qemu { runtime, .. } => runtime.layout().box_paths(id).box_dir().to_path_buf(),
            Kind::Firecracker { runtime, .. } => {
                runtime.layout().box_paths(id).box_dir().to_path_buf()
            }
        }
    }
}
