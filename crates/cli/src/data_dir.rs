//! berth's data directory: where the daemon keeps its state, and where client commands find
//! the daemon's address (`berth.url`) and the admin key (`admin.key`).

use std::path::{Path, PathBuf};

/// The files the daemon writes: its base URL (one line) and, on its first start, the admin
/// API key (mode 0600).
pub use berth_server::{ADMIN_KEY_FILE, URL_FILE};

/// Where the data directory is by default, given the environment.
///
/// `--data-dir` and `BERTH_DATA_DIR` are handled by clap before this is consulted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultDirEnv {
    pub is_root: bool,
    pub xdg_data_home: Option<PathBuf>,
    pub home: Option<PathBuf>,
}

impl DefaultDirEnv {
    /// Reads the real process environment.
    pub fn from_process() -> DefaultDirEnv {
        DefaultDirEnv {
            is_root: is_root(),
            xdg_data_home: non_empty_env("XDG_DATA_HOME"),
            home: non_empty_env("HOME"),
        }
    }

    /// `/var/lib/berth` as root; else `$XDG_DATA_HOME/berth`, else `~/.local/share/berth`.
    pub fn default_dir(&self) -> PathBuf {
        if self.is_root {
            return PathBuf::from("/var/lib/berth");
        }
        // The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
        if let Some(xdg) = self.xdg_data_home.as_ref().filter(|p| p.is_absolute()) {
            return xdg.join("berth");
        }
        match &self.home {
            Some(home) => home.join(".local/share/berth"),
            // No HOME at all: fall back to a directory relative to the working directory
            // rather than guessing someone else's.
            None => PathBuf::from(".berth"),
        }
    }
}

/// The data directory to use: the explicit one (`--data-dir` / `BERTH_DATA_DIR`) or the
/// default for this user.
pub fn resolve(explicit: Option<&Path>) -> PathBuf {
    match explicit {
        Some(dir) => dir.to_path_buf(),
        None => DefaultDirEnv::from_process().default_dir(),
    }
}

fn non_empty_env(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(is_root: bool, xdg: Option<&str>, home: Option<&str>) -> DefaultDirEnv {
        DefaultDirEnv {
            is_root,
            xdg_data_home: xdg.map(PathBuf::from),
            home: home.map(PathBuf::from),
        }
    }

    #[test]
    fn root_uses_var_lib() {
        assert_eq!(
            env(true, Some("/x"), Some("/root")).default_dir(),
            PathBuf::from("/var/lib/berth")
        );
    }

    #[test]
    fn users_prefer_xdg_data_home_then_home() {
        assert_eq!(
            env(false, Some("/x/data"), Some("/home/a")).default_dir(),
            PathBuf::from("/x/data/berth")
        );
        assert_eq!(
            env(false, None, Some("/home/a")).default_dir(),
            PathBuf::from("/home/a/.local/share/berth")
        );
        // A relative XDG_DATA_HOME is ignored, as the XDG spec says.
        assert_eq!(
            env(false, Some("rel"), Some("/home/a")).default_dir(),
            PathBuf::from("/home/a/.local/share/berth")
        );
    }

    #[test]
    fn explicit_dir_wins() {
        assert_eq!(resolve(Some(Path::new("/d"))), PathBuf::from("/d"));
    }
}
