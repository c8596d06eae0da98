//! The `deploy-validate` part: what checks the deployment manifests under `deploy/` without a
//! cluster. `kubectl` renders `deploy/k8s` with its built-in kustomize; a venv under the
//! workspace's `target/deploy-validate`, made by `scripts/install-deps.sh --tests` (which
//! keeps it there, so a rerun installs nothing), holds PyPI's `kubernetes-validate` (the
//! Kubernetes API's JSON schemas, bundled per version: no network) and `python-hcl2` (parses
//! the Nomad job files). Its PyYAML, a dependency of kubernetes-validate, reads the YAML.
//!
//! Debian packages no kubectl, so install-deps cannot add one: it must be on the machine
//! already (berth's development and CI machines carry it).

use std::path::PathBuf;
use std::process::Command;

/// The kubernetes-validate version the tests run (`scripts/install-deps.sh` pins the same).
pub const KUBERNETES_VALIDATE: &str = "1.37.0";
/// The python-hcl2 version the tests run; its serialization options changed across majors.
pub const PYTHON_HCL2: &str = "8.1.4";

/// The venv's Python, with both pinned validators importable, or why there is none (for
/// [`crate::skip`] with `deploy-validate`).
pub fn python() -> Result<PathBuf, String> {
    let python = crate::pinned_python::target_dir("deploy-validate/venv/bin/python");
    let made_by = "scripts/install-deps.sh --tests makes it";
    let python = crate::pinned_python::check(
        python,
        "kubernetes_validate",
        "kubernetes-validate",
        KUBERNETES_VALIDATE,
        made_by,
    )?;
    crate::pinned_python::check(python, "hcl2", "python-hcl2", PYTHON_HCL2, made_by)
}

/// `kubectl` on `PATH`, answering `kubectl version --client`, or why there is none (for
/// [`crate::skip`] with `deploy-validate`).
pub fn kubectl() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kubectl = std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|candidate| candidate.is_file())
        .ok_or("no kubectl on PATH (Debian packages none; its kustomize renders deploy/k8s)")?;
    let out = Command::new(&kubectl)
        .args(["version", "--client"])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", kubectl.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} version --client failed ({}): {}",
            kubectl.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(kubectl)
}
