//! The runtimes one daemon may run boxes on (`sandbox`, `qemu`), each either ready or
//! unavailable with the reason. A box's runtime is chosen at creation (the daemon's default
//! unless the request names one) and kept for its life: every operation on the box goes to
//! that runtime, and a box whose runtime is unavailable fails rather than moving.

use std::sync::Arc;

use berth_runtime::Runtime;
use serde::Serialize;

/// Whether a runtime boots VMs from images (`qemu`, `firecracker`) rather than sharing the
/// host's `/usr` (`sandbox`): which template bases it can run.
pub fn boots_images(runtime: &str) -> bool {
    matches!(runtime, "qemu" | "firecracker")
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
    },
    Unavailable {
        reason: String,
    },
}

/// The daemon's runtimes and its default for new boxes.
#[derive(Clone)]
pub struct Runtimes {
    entries: Vec<RuntimeEntry>,
    default: String,
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
            entries,
            default: default.into(),
        })
    }

    /// One ready runtime, the default (tests, benches, embedders with one backend).
    pub fn single(runtime: Arc<dyn Runtime>) -> Runtimes {
        let name = runtime.name().to_owned();
        Runtimes {
            entries: vec![RuntimeEntry::ready(runtime, None)],
            default: name,
        }
    }

    pub fn default_name(&self) -> &str {
        &self.default
    }

    pub fn entries(&self) -> &[RuntimeEntry] {
        &self.entries
    }

    /// The ready runtime called `name`.
    pub fn get(&self, name: &str) -> Result<&Arc<dyn Runtime>, RuntimeLookupError> {
        let entry = self
            .entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| RuntimeLookupError::Unknown {
                name: name.into(),
                known: self.entries.iter().map(|e| e.name.clone()).collect(),
            })?;
        match &entry.state {
            RuntimeState::Ready { runtime, .. } => Ok(runtime),
            RuntimeState::Unavailable { reason } => Err(RuntimeLookupError::Unavailable {
                name: name.into(),
                reason: reason.clone(),
            }),
        }
    }

    /// Every ready runtime.
    pub fn ready(&self) -> impl Iterator<Item = &Arc<dyn Runtime>> {
        self.entries.iter().filter_map(|e| match &e.state {
            RuntimeState::Ready { runtime, .. } => Some(runtime),
            RuntimeState::Unavailable { .. } => None,
        })
    }

    /// The `GET /v1/runtimes` view.
    pub fn views(&self) -> Vec<RuntimeView> {
        self.entries
            .iter()
            .map(|e| {
                let (available, reason, details) = match &e.state {
                    RuntimeState::Ready { details, .. } => (true, None, details.clone()),
                    RuntimeState::Unavailable { reason } => (false, Some(reason.clone()), None),
                };
                RuntimeView {
                    name: e.name.clone(),
                    available,
                    reason,
                    default: e.name == self.default,
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
            state: RuntimeState::Ready { runtime, details },
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
    /// Why it is unavailable; `null` when available.
    pub reason: Option<String>,
    /// Boxes created without `runtime` get this one.
    pub default: bool,
    /// What it runs with (qemu: accelerator and why, binaries, kernel, initramfs, boot
    /// deadline); `null` when unavailable or nothing to say.
    #[schema(value_type = Option<Object>)]
    pub details: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct RuntimeListView {
    pub runtimes: Vec<RuntimeView>,
}

/// The qemu runtime over the images `berth image build` recorded (never downloading), or
/// why it is unavailable. Its accelerator probe boots the kernel once under KVM (bounded
/// by the probe's own deadline, well under a second when KVM works).
pub async fn qemu_entry(data_dir: std::path::PathBuf) -> RuntimeEntry {
    let data_dir = data_dir.as_path();
    use berth_runtime::qemu::{QemuConfig, QemuRuntime};

    let built = match crate::images::BuiltImages::load(data_dir) {
        Ok(built) => built,
        Err(e) => return RuntimeEntry::unavailable("qemu", crate::error::error_chain(&e)),
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
        Err(e) => RuntimeEntry::unavailable("qemu", crate::error::error_chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_must_be_known_and_names_unique() {
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
}
