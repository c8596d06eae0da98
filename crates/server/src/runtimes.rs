//! The runtimes one daemon may run boxes on (`sandbox`, `qemu`), each either ready or
//! unavailable with the reason. A box's runtime is chosen at creation (the daemon's default
//! unless the request names one) and kept for its life: every operation on the box goes to
//! that runtime, and a box whose runtime is unavailable fails rather than moving.
//!
//! A runtime unavailable for want of images (qemu before `berth image build`) becomes ready
//! without a daemon restart: [`watch_images`] notices a new record of built images. A
//! ready runtime is never replaced (its running boxes hold it). From the moment the record
//! changes until its check ends, such a runtime's reason is [`CHECKING_IMAGES`], so that
//! `berth image build` can wait for the check and no caller sees the stale reason.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use berth_runtime::Capabilities;
use berth_runtime::Runtime;
use serde::Serialize;

/// Whether a runtime boots images only (a VM), where the sandbox also shares the host's
/// `/usr`: its boxes' default template is an image one. Asked of the backend's
/// capabilities (`berth_runtime::BACKENDS`), known whether or not this daemon runs it.
pub fn boots_images(runtime: &str) -> bool {
    berth_runtime::backend_capabilities(runtime).is_some_and(|c| !c.host_rootfs)
}

/// Whether boxes of a base run on `runtime`: an image base (`minimal`, `debian`, `dir:`,
/// `tarball:`) on every runtime, `host` (the host's own `/usr`) on the sandbox only.
pub fn runs_base(runtime: &str, base_is_image: bool) -> bool {
    base_is_image || !boots_images(runtime)
}

/// One runtime the daemon knows of.
#[derive(Clone)]
pub struct RuntimeEntry {
    pub name: String,
    pub state: RuntimeState,
}

#[derive(Clone)]
pub enum RuntimeState {
    Ready {
        runtime: Arc<dyn Runtime>,
        /// What it runs with (`QemuRuntime::describe()` for qemu), shown as is.
        details: Option<serde_json::Value>,
        /// What an admin must know of how it runs (Firecracker un-jailed), shown as its
        /// `reason`.
        notice: Option<String>,
    },
    Unavailable {
        reason: String,
    },
}

/// The daemon's runtimes and its default for new boxes. Clones share the entries.
#[derive(Clone)]
pub struct Runtimes {
    entries: Arc<RwLock<Vec<RuntimeEntry>>>,
    default: String,
    /// Firecracker was asked to run un-jailed (`berth up --firecracker-unjailed`): a
    /// firecracker runtime made later ([`watch_images`]) runs so too.
    firecracker_unjailed: bool,
    /// The record of built images as [`watch_images`] last checked it.
    checked: Arc<Mutex<ImagesChecked>>,
}

/// The reason a VM runtime shows while the daemon checks newly built images (its probe
/// boots the kernel): it is neither ready nor unavailable for its old reason yet.
pub const CHECKING_IMAGES: &str = "checking the new images";

/// How often [`watch_images`] looks at the record of built images.
const IMAGE_WATCH_EVERY: Duration = Duration::from_millis(500);

/// The record of built images [`watch_images`] watches (`None`: no watcher) and its
/// modification time when its last check began.
#[derive(Debug, Default)]
struct ImagesChecked {
    record: Option<PathBuf>,
    seen: Option<SystemTime>,
}

impl ImagesChecked {
    /// Whether the record has changed since the last check began: a check is due or under
    /// way.
    fn outdated(&self) -> bool {
        self.record
            .as_deref()
            .is_some_and(|record| modified(record) != self.seen)
    }
}

fn modified(path: &std::path::Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The registry cannot be made as asked.
#[derive(Debug, thiserror::Error)]
pub enum RuntimesError {
    #[error("the default runtime {name:?} is not one of the daemon's runtimes ({})", known.join(", "))]
    UnknownDefault { name: String, known: Vec<String> },
    #[error("runtime {name:?} is given twice")]
    Duplicate { name: String },
}

/// Why a box cannot use a runtime.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuntimeLookupError {
    #[error("unknown runtime {name:?}; known: {}", known.join(", "))]
    Unknown { name: String, known: Vec<String> },
    #[error("runtime {name:?} is unavailable: {reason}")]
    Unavailable { name: String, reason: String },
}

impl Runtimes {
    /// `entries` with `default` the runtime of boxes created without one (it may be
    /// unavailable: creating such boxes then fails with its reason).
    pub fn new(entries: Vec<RuntimeEntry>, default: &str) -> Result<Runtimes, RuntimesError> {
        for (i, e) in entries.iter().enumerate() {
            if entries[..i].iter().any(|o| o.name == e.name) {
                return Err(RuntimesError::Duplicate {
                    name: e.name.clone(),
                });
            }
        }
        if !entries.iter().any(|e| e.name == default) {
            return Err(RuntimesError::UnknownDefault {
                name: default.into(),
                known: entries.iter().map(|e| e.name.clone()).collect(),
            });
        }
        Ok(Runtimes {
            entries: Arc::new(RwLock::new(entries)),
            default: default.into(),
            firecracker_unjailed: false,
            checked: Arc::default(),
        })
    }

    /// Records that Firecracker runs un-jailed, for the runtimes made later.
    pub fn with_firecracker_unjailed(mut self, unjailed: bool) -> Runtimes {
        self.firecracker_unjailed = unjailed;
        self
    }

    /// One ready runtime, the default (tests, benches, embedders with one backend).
    pub fn single(runtime: Arc<dyn Runtime>) -> Runtimes {
        let name = runtime.name().to_owned();
        Runtimes {
            entries: Arc::new(RwLock::new(vec![RuntimeEntry::ready(runtime, None)])),
            default: name,
            firecracker_unjailed: false,
            checked: Arc::default(),
        }
    }

    pub fn default_name(&self) -> &str {
        &self.default
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Vec<RuntimeEntry>> {
        // A panic while the lock was held cannot leave the list half-written (writes
        // replace one element whole).
        self.entries.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Puts `entry` in place of the unavailable entry of the same name. A ready entry is
    /// never replaced (boxes run on it); `false` when nothing changed.
    pub fn replace_unavailable(&self, entry: RuntimeEntry) -> bool {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        match entries.iter_mut().find(|e| e.name == entry.name) {
            Some(old) if matches!(old.state, RuntimeState::Unavailable { .. }) => {
                *old = entry;
                true
            }
            _ => false,
        }
    }

    /// Whether the runtime called `name` is known and unavailable.
    fn is_unavailable(&self, name: &str) -> bool {
        self.read()
            .iter()
            .any(|e| e.name == name && matches!(e.state, RuntimeState::Unavailable { .. }))
    }

    /// The ready runtime called `name`.
    pub fn get(&self, name: &str) -> Result<Arc<dyn Runtime>, RuntimeLookupError> {
        let entries = self.read();
        let entry =
            entries
                .iter()
                .find(|e| e.name == name)
                .ok_or_else(|| RuntimeLookupError::Unknown {
                    name: name.into(),
                    known: entries.iter().map(|e| e.name.clone()).collect(),
                })?;
        match &entry.state {
            RuntimeState::Ready { runtime, .. } => Ok(runtime.clone()),
            RuntimeState::Unavailable { reason } => Err(RuntimeLookupError::Unavailable {
                name: name.into(),
                reason: reason.clone(),
            }),
        }
    }

    /// What the runtime `name` can do: the ready backend's own answer (a host may lack
    /// what the backend could do elsewhere), else what berth's backend of that name can.
    pub fn capabilities(&self, name: &str) -> Capabilities {
        match self.get(name) {
            Ok(runtime) => runtime.capabilities(),
            Err(_) => known_capabilities(name),
        }
    }

    /// Every ready runtime.
    pub fn ready(&self) -> Vec<Arc<dyn Runtime>> {
        self.read()
            .iter()
            .filter_map(|e| match &e.state {
                RuntimeState::Ready { runtime, .. } => Some(runtime.clone()),
                RuntimeState::Unavailable { .. } => None,
            })
            .collect()
    }

    fn images_checked(&self) -> std::sync::MutexGuard<'_, ImagesChecked> {
        self.checked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `GET /v1/runtimes` view.
    pub fn views(&self) -> Vec<RuntimeView> {
        let checking = self.images_checked().outdated();
        self.read()
            .iter()
            .map(|e| {
                let (available, reason, details, capabilities) = match &e.state {
                    RuntimeState::Ready {
                        details,
                        notice,
                        runtime,
                    } => (
                        true,
                        notice.clone(),
                        details.clone(),
                        runtime.capabilities(),
                    ),
                    RuntimeState::Unavailable { reason } => (
                        false,
                        Some(if checking && boots_images(&e.name) {
                            CHECKING_IMAGES.to_owned()
                        } else {
                            reason.clone()
                        }),
                        None,
                        known_capabilities(&e.name),
                    ),
                };
                RuntimeView {
                    name: e.name.clone(),
                    available,
                    reason,
                    default: e.name == self.default,
                    capabilities,
                    details,
                }
            })
            .collect()
    }
}

impl RuntimeEntry {
    pub fn ready(runtime: Arc<dyn Runtime>, details: Option<serde_json::Value>) -> RuntimeEntry {
        RuntimeEntry {
            name: runtime.name().to_owned(),
            state: RuntimeState::Ready {
                runtime,
                details,
                notice: None,
            },
        }
    }

    pub fn unavailable(name: &str, reason: impl Into<String>) -> RuntimeEntry {
        RuntimeEntry {
            name: name.to_owned(),
            state: RuntimeState::Unavailable {
                reason: reason.into(),
            },
        }
    }
}

impl std::fmt::Debug for Runtimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut list = f.debug_list();
        for view in self.views() {
            list.entry(&(view.name, view.available, view.reason, view.default));
        }
        list.finish()
    }
}

/// One runtime as `GET /v1/runtimes` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RuntimeView {
    pub name: String,
    pub available: bool,
    /// Why it is unavailable; for an available one, a warning of how it runs (Firecracker
    /// un-jailed, as host root), else `null`.
    pub reason: Option<String>,
    /// Boxes created without `runtime` get this one.
    pub default: bool,
    /// The rungs of the sleep ladder it can take a box to (`pause`, `snapshot`), and
    /// whether it runs boxes on the host's own root (`host_rootfs`).
    #[schema(value_type = Object)]
    pub capabilities: Capabilities,
    /// What it runs with (qemu: accelerator and why, binaries, kernel, initramfs, boot
    /// deadline); `null` when unavailable or nothing to say.
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RuntimeListView {
    pub runtimes: Vec<RuntimeView>,
}

/// What berth's backend `name` can do anywhere; nothing for a name berth has no backend of.
fn known_capabilities(name: &str) -> Capabilities {
    berth_runtime::backend_capabilities(name).unwrap_or(Capabilities {
        pause: false,
        snapshot: false,
        host_rootfs: false,
    })
}

/// Every runtime berth has, whether or not this daemon can run it.
pub fn all_runtimes() -> impl Iterator<Item = &'static str> {
    berth_runtime::BACKENDS.iter().map(|(name, _)| *name)
}

/// The runtimes that boot `berth image build`'s images ([`boots_images`]).
fn vm_runtimes() -> impl Iterator<Item = &'static str> {
    all_runtimes().filter(|name| boots_images(name))
}

/// Makes a VM runtime ready once `berth image build` has run, without a daemon restart:
/// every [`IMAGE_WATCH_EVERY`], while a VM runtime is unavailable and the record of built
/// images has changed since the last look, that runtime is made again from it (its reason
/// updated when it still cannot run). Ends when no VM runtime is unavailable.
pub fn watch_images(runtimes: Runtimes, data_dir: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let record = crate::images::BuiltImages::path(&data_dir);
        *runtimes.images_checked() = ImagesChecked {
            record: Some(record.clone()),
            seen: modified(&record),
        };
        let waiting = |runtimes: &Runtimes| -> Vec<&'static str> {
            vm_runtimes()
                .filter(|name| runtimes.is_unavailable(name))
                .collect()
        };
        while !waiting(&runtimes).is_empty() {
            tokio::time::sleep(IMAGE_WATCH_EVERY).await;
            let now = modified(&record);
            if now == runtimes.images_checked().seen {
                continue;
            }
            for name in waiting(&runtimes) {
                let entry = vm_entry(name, data_dir.clone(), runtimes.firecracker_unjailed).await;
                match &entry.state {
                    RuntimeState::Ready { .. } => {
                        tracing::info!(runtime = name, "runtime ready: VM images built")
                    }
                    RuntimeState::Unavailable { reason } => {
                        tracing::info!(runtime = name, %reason, "runtime still unavailable after an image build")
                    }
                }
                runtimes.replace_unavailable(entry);
            }
            // Only now: until the check ends, the views say it is under way.
            runtimes.images_checked().seen = now;
        }
    })
}

/// The VM runtime `name` ([`vm_runtimes`]) over the recorded images, or why not.
pub async fn vm_entry(name: &str, data_dir: PathBuf, firecracker_unjailed: bool) -> RuntimeEntry {
    match name {
        "firecracker" => firecracker_entry(data_dir, firecracker_unjailed).await,
        _ => qemu_entry(data_dir).await,
    }
}

/// The firecracker runtime over the images `berth image build` recorded (the ELF kernel
/// it extracted), or why it is unavailable (most often: no `firecracker` binary or jailer,
/// or no KVM that runs a guest, which its probe finds out by booting the kernel). Jailed
/// unless `unjailed` (`berth up --firecracker-unjailed`), which it then says in its
/// `reason`.
pub async fn firecracker_entry(data_dir: PathBuf, unjailed: bool) -> RuntimeEntry {
    use berth_runtime::firecracker::{FirecrackerConfig, FirecrackerRuntime};
    let data_dir = data_dir.as_path();
    let built = match crate::images::BuiltImages::load(data_dir) {
        Ok(built) => built,
        Err(e) => return RuntimeEntry::unavailable("firecracker", berth_runtime::error_chain(&e)),
    };
    let (Some(kernel), Some(initramfs)) = (&built.vmlinux, &built.initramfs) else {
        return RuntimeEntry::unavailable(
            "firecracker",
            "no VM images with an ELF kernel in the data dir: run `berth image build`",
        );
    };
    let mut config = FirecrackerConfig::new(data_dir, kernel, initramfs);
    if unjailed {
        config.jailer = None;
    }
    match FirecrackerRuntime::new(config).await {
        Ok(firecracker) => {
            let described = firecracker.describe();
            let notice = described.notice.clone();
            let mut entry =
                RuntimeEntry::ready(Arc::new(firecracker), serde_json::to_value(described).ok());
            if let RuntimeState::Ready { notice: slot, .. } = &mut entry.state {
                *slot = notice;
            }
            entry
        }
        Err(e) => RuntimeEntry::unavailable("firecracker", berth_runtime::error_chain(&e)),
    }
}

/// The qemu runtime over the images `berth image build` recorded (never downloading), or
/// why it is unavailable. Its accelerator probe boots the kernel once under KVM (bounded
/// by the probe's own deadline, well under a second when KVM works).
pub async fn qemu_entry(data_dir: std::path::PathBuf) -> RuntimeEntry {
    let data_dir = data_dir.as_path();
    use berth_runtime::qemu::{QemuConfig, QemuRuntime};

    let built = match crate::images::BuiltImages::load(data_dir) {
        Ok(built) => built,
        Err(e) => return RuntimeEntry::unavailable("qemu", berth_runtime::error_chain(&e)),
    };
    let (Some(kernel), Some(initramfs)) = (&built.kernel, &built.initramfs) else {
        return RuntimeEntry::unavailable(
            "qemu",
            "no VM images in the data dir: run `berth image build`",
        );
    };
    let began = std::time::Instant::now();
    match QemuRuntime::new(QemuConfig::new(data_dir, kernel, initramfs)).await {
        Ok(qemu) => {
            tracing::info!(
                elapsed_ms = began.elapsed().as_millis() as u64,
                "qemu runtime ready"
            );
            let details = serde_json::to_value(qemu.describe()).ok();
            RuntimeEntry::ready(Arc::new(qemu), details)
        }
        Err(e) => RuntimeEntry::unavailable("qemu", berth_runtime::error_chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_must_be_known_and_names_unique() {
        assert!(boots_images("qemu") && boots_images("firecracker") && !boots_images("sandbox"));
        assert!(
            !boots_images("unknown") && runs_base("sandbox", false) && !runs_base("qemu", false)
        );
        assert_eq!(
            all_runtimes().collect::<Vec<_>>(),
            ["sandbox", "qemu", "firecracker"]
        );
        let a = RuntimeEntry::unavailable("qemu", "no images");
        assert!(matches!(
            Runtimes::new(vec![a.clone()], "sandbox"),
            Err(RuntimesError::UnknownDefault { .. })
        ));
        assert!(matches!(
            Runtimes::new(vec![a.clone(), a.clone()], "qemu"),
            Err(RuntimesError::Duplicate { .. })
        ));
        let r = Runtimes::new(vec![a], "qemu").unwrap();
        assert_eq!(
            r.get("qemu").err(),
            Some(RuntimeLookupError::Unavailable {
                name: "qemu".into(),
                reason: "no images".into()
            })
        );
        assert!(matches!(
            r.get("firecracker"),
            Err(RuntimeLookupError::Unknown { .. })
        ));
        let views = r.views();
        assert_eq!(views.len(), 1);
        assert!(views[0].default && !views[0].available);
    }

    #[test]
    fn a_vm_runtime_says_it_is_checking_new_images_until_the_check_ends() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("built.json");
        std::fs::write(&record, "{}").unwrap();
        let r = Runtimes::new(
            vec![
                RuntimeEntry::unavailable("sandbox", "no runc"),
                RuntimeEntry::unavailable("qemu", "no VM images"),
            ],
            "sandbox",
        )
        .unwrap();
        let reasons = |r: &Runtimes| -> Vec<String> {
            r.views().into_iter().map(|v| v.reason.unwrap()).collect()
        };
        // No watcher: the stored reasons.
        assert_eq!(reasons(&r), ["no runc", "no VM images"]);
        // The record changed since the last check: only the VM runtime is being checked.
        *r.images_checked() = ImagesChecked {
            record: Some(record.clone()),
            seen: None,
        };
        assert_eq!(reasons(&r), ["no runc", CHECKING_IMAGES]);
        r.images_checked().seen = modified(&record);
        assert_eq!(reasons(&r), ["no runc", "no VM images"]);
    }
}
