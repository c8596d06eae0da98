//! The `sdk-python` part: berth's own Python SDK (`sdk/python`), installed editable into a
//! venv under the workspace's `target/sdk-python` with the httpx, websockets and pytest versions its
//! tests pin, by `scripts/install-deps.sh --tests` (which keeps it there, so a rerun
//! installs nothing).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The SDK's source: `sdk/python` at the workspace's root.
pub fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/python")
}

/// `<target>/sdk-python/venv`.
fn venv_dir() -> PathBuf {
    crate::pinned_python::target_dir("sdk-python/venv")
}

/// The venv's Python, with the SDK (from this checkout) and pytest importable, or why
/// there is none (for [`crate::skip`] with `sdk-python`).
pub fn find() -> Result<PathBuf, String> {
    let python = venv_dir().join("bin/python");
    if !python.is_file() {
        return Err(format!(
            "no venv with berth's Python SDK at {} (scripts/install-deps.sh --tests makes it)",
            python.display()
        ));
    }
    let out = Command::new(&python)
        .args(["-c", "import berth, pytest; print(berth.__file__)"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    let module = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let ours = sdk_dir().join("berth").canonicalize().ok();
    if !out.status.success() || module.parent().and_then(|p| p.canonicalize().ok()) != ours {
        return Err(format!(
            "{} cannot import this checkout's berth SDK and pytest ({}{}); rerun scripts/install-deps.sh --tests",
            python.display(),
            module.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(python)
}
