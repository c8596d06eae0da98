//! The `sandbox` backend: OCI bundles run by runc, crun or runsc.
//! PUBLIC SURFACE ONLY — the implementation is being written.

use std::path::PathBuf;

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

#[derive(Debug)]
pub struct SandboxRuntime {
    _config: SandboxConfig,
}

impl SandboxRuntime {
    /// Checks the host (root, the OCI runtime, berth-init) and prepares the data dir.
    pub fn new(config: SandboxConfig) -> Result<SandboxRuntime, crate::RuntimeError> {
        Ok(SandboxRuntime { _config: config })
    }
}
