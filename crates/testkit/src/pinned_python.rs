//! What the parts with a pinned Python package share: their venvs under the workspace's
//! `target/`, and the check that a Python has the pinned version of a package.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `<target>/<name>`: `$CARGO_TARGET_DIR`, else the workspace's `target/`.
pub fn target_dir(name: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join(name)
}

/// `python` itself when it imports `module` and has distribution `dist` at `pinned`, or why
/// not (`made_by` says what makes it).
pub fn check(
    python: PathBuf,
    module: &str,
    dist: &str,
    pinned: &str,
    made_by: &str,
) -> Result<PathBuf, String> {
    if !python.is_file() {
        return Err(format!(
            "no Python with {dist} at {} ({made_by})",
            python.display()
        ));
    }
    let code =
        format!("import importlib.metadata as m; import {module}; print(m.version('{dist}'))");
    let out = Command::new(&python)
        .args(["-c", &code])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || version != pinned {
        return Err(format!(
            "{} has {dist} {version:?}, not {pinned} ({}); rerun scripts/install-deps.sh --tests",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(python)
}
