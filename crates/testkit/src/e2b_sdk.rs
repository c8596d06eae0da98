//! The `e2b-sdk` part: E2B's official Python SDK, unmodified, at the version berth pins
//! ([`PINNED`]), installed from PyPI into a venv under the workspace's `target/e2b-sdk` by
//! `scripts/install-deps.sh --tests` (which keeps it there, so a rerun installs nothing).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The SDK version berth's E2B API is tested against.
pub const PINNED: &str = "2.63.0";
/// Names another Python whose environment has the SDK (instead of the venv).
pub const PYTHON_VAR: &str = "BERTH_E2B_PYTHON";

/// The venv's directory: `<target>/e2b-sdk/venv`.
pub fn venv_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("e2b-sdk").join("venv")
}

/// The Python that has the pinned SDK, or why there is none (for [`crate::skip`] with
/// `e2b-sdk`).
pub fn find() -> Result<PathBuf, String> {
    let python = std::env::var_os(PYTHON_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| venv_dir().join("bin").join("python"));
    if !python.is_file() {
        return Err(format!(
            "no Python with the E2B SDK at {} (scripts/install-deps.sh --tests makes it, or set {PYTHON_VAR})",
            python.display()
        ));
    }
    let out = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; import e2b; print(m.version('e2b'))",
        ])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || version != PINNED {
        return Err(format!(
            "{} has e2b {version:?}, not {PINNED} ({}); rerun scripts/install-deps.sh --tests",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(python)
}
