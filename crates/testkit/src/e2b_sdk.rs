//! The `e2b-sdk` part: E2B's official SDKs, unmodified, at the versions berth pins: the
//! Python one ([`PINNED`]) from PyPI into a venv, and the npm one ([`PINNED_NPM`]) from the
//! npm registry, both under the workspace's `target/e2b-sdk`, by
//! `scripts/install-deps.sh --tests` (which keeps them there, so a rerun installs nothing).

use std::path::PathBuf;

/// The SDK version berth's E2B API is tested against.
pub const PINNED: &str = "2.63.0";
/// The npm SDK version berth's E2B API is tested against.
pub const PINNED_NPM: &str = "2.51.0";
/// The desktop SDK (`e2b-desktop`) version berth's `desktop` template is tested against.
pub const PINNED_DESKTOP: &str = "2.7.2";
/// Names another Python whose environment has the SDK (instead of the venv).
pub const PYTHON_VAR: &str = "BERTH_E2B_PYTHON";

/// `<target>/e2b-sdk`.
fn sdk_dir() -> PathBuf {
    crate::pinned_python::target_dir("e2b-sdk")
}

/// The venv's directory: `<target>/e2b-sdk/venv`.
pub fn venv_dir() -> PathBuf {
    sdk_dir().join("venv")
}

/// The oldest Node the pinned npm SDK supports (its `engines`).
pub const NODE_MIN: (u32, u32, u32) = (20, 18, 1);

/// The npm SDK's ES module (what a script imports), or why there is none (for
/// [`crate::skip`] with `e2b-npm`). Node runs it: a `node` of [`NODE_MIN`] or newer must be
/// on `PATH`.
pub fn find_npm() -> Result<PathBuf, String> {
    let package = sdk_dir().join("node/node_modules/e2b");
    let manifest = std::fs::read_to_string(package.join("package.json")).map_err(|e| {
        format!(
            "no E2B npm SDK at {} ({e}; scripts/install-deps.sh --tests installs it when npm is here)",
            package.display()
        )
    })?;
    // The manifest's top-level version line, as npm publishes it (no JSON parser needed here).
    let version = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("\"version\":"))
        .map(|v| v.trim().trim_end_matches(',').trim_matches('"').to_owned())
        .unwrap_or_default();
    if version != PINNED_NPM {
        return Err(format!(
            "{} has e2b {version:?}, not {PINNED_NPM}; rerun scripts/install-deps.sh --tests",
            package.display()
        ));
    }
    crate::node::require(NODE_MIN, "the E2B npm SDK")?;
    Ok(package.join("dist/index.mjs"))
}

/// The Python that has the pinned SDK, or why there is none (for [`crate::skip`] with
/// `e2b-sdk`).
pub fn find() -> Result<PathBuf, String> {
    let python = std::env::var_os(PYTHON_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| venv_dir().join("bin").join("python"));
    let made_by = format!("scripts/install-deps.sh --tests makes it, or set {PYTHON_VAR}");
    crate::pinned_python::check(python, "e2b", "e2b", PINNED, &made_by)
}

/// The Python that has the pinned desktop SDK beside the pinned SDK, or why there is none
/// (for [`crate::skip`] with `e2b-sdk`).
pub fn find_desktop() -> Result<PathBuf, String> {
    let python = find()?;
    let made_by = format!("scripts/install-deps.sh --tests makes it, or set {PYTHON_VAR}");
    crate::pinned_python::check(
        python,
        "e2b_desktop",
        "e2b-desktop",
        PINNED_DESKTOP,
        &made_by,
    )
}
