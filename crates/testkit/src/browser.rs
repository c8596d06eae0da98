//! The `browser` part: what the web app's end-to-end tests (web/e2e, driven by Playwright)
//! need on the host. Playwright's own browser downloads are never used: the tests drive the
//! distribution's chromium, which `scripts/install-deps.sh --tests` installs.

use std::path::{Path, PathBuf};

/// The browser the tests drive unless `BERTH_CHROMIUM` names another.
pub const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";

/// What the end-to-end web tests run.
#[derive(Debug, Clone)]
pub struct Browser {
    pub chromium: PathBuf,
    pub node: PathBuf,
    pub npm: PathBuf,
}

/// The browser and node, or why the host lacks them (for [`crate::skip`] with `browser`).
pub fn find() -> Result<Browser, String> {
    find_with(
        std::env::var_os("BERTH_CHROMIUM")
            .map(PathBuf::from)
            .unwrap_or_else(|| DEFAULT_CHROMIUM.into()),
    )
}

fn find_with(chromium: PathBuf) -> Result<Browser, String> {
    if !is_executable(&chromium) {
        return Err(format!(
            "no chromium at {} (scripts/install-deps.sh --tests, or set BERTH_CHROMIUM)",
            chromium.display()
        ));
    }
    let on_path = |name: &str| {
        on_path(name).ok_or_else(|| {
            format!("no `{name}` on PATH (scripts/install-deps.sh installs nodejs and npm)")
        })
    };
    Ok(Browser {
        chromium,
        node: on_path("node")?,
        npm: on_path("npm")?,
    })
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| is_executable(path))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_chromium_is_named_in_the_reason() {
        let err = find_with("/nonexistent/chromium".into()).unwrap_err();
        assert!(err.contains("/nonexistent/chromium"), "{err}");
    }

    #[test]
    fn a_directory_is_not_a_program() {
        assert!(!is_executable(Path::new("/")));
        assert!(is_executable(Path::new("/bin/sh")));
    }
}
