//! The `sdk-typescript` part: berth's own TypeScript SDK (`sdk/typescript`), its npm
//! packages installed from its lockfile (`npm ci`: typescript, openapi-typescript, ws, tar,
//! esbuild) by `scripts/install-deps.sh --tests` (which also builds it once), and a `node`
//! of [`NODE_MIN`] or newer to build and run its `node --test` suite.

use std::path::{Path, PathBuf};

/// The oldest Node the SDK supports (its `engines`; Debian 12's own is 18.19).
pub const NODE_MIN: (u32, u32, u32) = (18, 0, 0);

/// The SDK's source: `sdk/typescript` at the workspace's root.
pub fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sdk/typescript")
}

/// The npm packages the build and the suite need, under `node_modules`.
const PACKAGES: &[&str] = &["typescript", "openapi-typescript", "ws", "tar", "esbuild"];

/// The SDK's directory, with its packages installed and a `node` (on `PATH`) new enough to
/// run it, or why not (for [`crate::skip`] with `sdk-typescript`).
pub fn find() -> Result<PathBuf, String> {
    let sdk = sdk_dir();
    for package in PACKAGES {
        let manifest = sdk.join("node_modules").join(package).join("package.json");
        if !manifest.is_file() {
            return Err(format!(
                "no {package} in {} (scripts/install-deps.sh --tests runs npm ci there)",
                sdk.join("node_modules").display()
            ));
        }
    }
    crate::node::require(NODE_MIN, "the TypeScript SDK")?;
    Ok(sdk)
}

/// The suite's test files (`test/*.test.mjs`), sorted, relative to [`sdk_dir`]: named one by
/// one, since `node --test DIR` means a directory on Node 18 and 20 but a glob on 22.
pub fn suite_files() -> Vec<String> {
    let dir = sdk_dir().join("test");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.ends_with(".test.mjs").then(|| format!("test/{name}"))
        })
        .collect();
    files.sort();
    files
}
