//! The `mcp-sdk` part: the official MCP Python SDK (PyPI `mcp`, [`PINNED`]), unmodified, in a
//! venv under the workspace's `target/mcp-sdk`, made by `scripts/install-deps.sh --tests`
//! (which keeps it there, so a rerun installs nothing). Its client drives berth's MCP server.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The SDK version berth's MCP server is tested against (`scripts/install-deps.sh` pins the
/// same).
pub const PINNED: &str = "2.3.0";

/// `<target>/mcp-sdk/venv`.
fn venv_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("mcp-sdk/venv")
}

/// The venv's Python, with the pinned SDK importable, or why there is none (for
/// [`crate::skip`] with `mcp-sdk`).
pub fn find() -> Result<PathBuf, String> {
    let python = venv_dir().join("bin/python");
    if !python.is_file() {
        return Err(format!(
            "no venv with the MCP Python SDK at {} (scripts/install-deps.sh --tests makes it)",
            python.display()
        ));
    }
    let out = Command::new(&python)
        .args([
            "-c",
            "import importlib.metadata as m; import mcp; print(m.version('mcp'))",
        ])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || version != PINNED {
        return Err(format!(
            "{} has mcp {version:?}, not {PINNED} ({}); rerun scripts/install-deps.sh --tests",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(python)
}
