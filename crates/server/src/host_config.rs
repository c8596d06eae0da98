//! The host's own settings: `<data-dir>/berth.toml`, or the file `berth up --config` names.
//! Everything has a default, so the file is optional. The format is in `docs/config.md`.
//!
//! ```toml
//! [egress]
//! # Name → address, bypassing DNS AND the forbidden-address checks. For tests and for
//! # pinning internal services only.
//! resolve_overrides = { "api.example.test" = "127.0.0.1:8443" }
//! # CAs the gateway trusts upstream besides the public web roots (PEM files).
//! extra_roots = ["/etc/berth/internal-ca.pem"]
//!
//! [secrets]
//! # The key the secret store is encrypted with; keep it off the database's backups.
//! key_file = "/etc/berth/secrets.key"
//!
//! [storage]
//! # Below this much free space on the data dir's disk, new boxes and volume growth are
//! # refused (everything else goes on).
//! min_free_percent = 5
//! ```

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The file name looked up in the data directory when no `--config` is given.
pub const HOST_CONFIG_FILE: &str = "berth.toml";
/// The secret store's key, in the data directory unless `[secrets] key_file` says otherwise.
pub const DEFAULT_SECRETS_KEY_FILE: &str = "secrets.key";
/// A config file larger than this is refused (it is a few lines).
const MAX_BYTES: u64 = 1024 * 1024;

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    #[serde(default)]
    pub egress: EgressHostConfig,
    #[serde(default)]
    pub secrets: SecretsHostConfig,
    #[serde(default)]
    pub storage: StorageHostConfig,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageHostConfig {
    /// Percent of the data dir's file system that must stay free (0 to 50).
    #[serde(default = "default_min_free_percent")]
    pub min_free_percent: f64,
}

impl Default for StorageHostConfig {
    fn default() -> Self {
        StorageHostConfig {
            min_free_percent: default_min_free_percent(),
        }
    }
}

fn default_min_free_percent() -> f64 {
    crate::disk_space::DEFAULT_MIN_FREE_PERCENT
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressHostConfig {
    /// Host name → fixed address; the only way past the gateway's address checks.
    #[serde(default)]
    pub resolve_overrides: HashMap<String, SocketAddr>,
    /// PEM files of CAs the gateway trusts upstream, in addition to the webpki roots.
    #[serde(default)]
    pub extra_roots: Vec<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretsHostConfig {
    /// `None`: `<data-dir>/secrets.key`.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

impl SecretsHostConfig {
    /// Where the secret store's key lives for a daemon on `data_dir`.
    pub fn key_file(&self, data_dir: &Path) -> PathBuf {
        self.key_file
            .clone()
            .unwrap_or_else(|| data_dir.join(DEFAULT_SECRETS_KEY_FILE))
    }
}

/// Why the host config could not be used. Shown as `FILE[:LINE]: message`.
#[derive(Debug, thiserror::Error)]
pub enum HostConfigError {
    #[error("{}: cannot read the file", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: the file is larger than {MAX_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}{}: {}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), source.message())]
    Syntax {
        path: PathBuf,
        line: Option<usize>,
        /// Boxed: an error is rare, a `Result` of one is everywhere.
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{}: [egress] extra_roots: {} must be an absolute path", path.display(), root.display())]
    RelativeRoot { path: PathBuf, root: PathBuf },
    #[error("{}: [storage] min_free_percent must be between 0 and 50, got {value}", path.display())]
    MinFreeOutOfRange { path: PathBuf, value: f64 },
}

impl HostConfig {
    /// Reads `path`; a missing file is an error (the caller asked for it by name).
    pub fn load(path: &Path) -> Result<HostConfig, HostConfigError> {
        let read = |source| HostConfigError::Read {
            path: path.to_path_buf(),
            source,
        };
        let len = std::fs::metadata(path).map_err(read)?.len();
        if len > MAX_BYTES {
            return Err(HostConfigError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        HostConfig::parse(path, &text)
    }

    /// `<data-dir>/berth.toml` when it exists, else the defaults.
    pub fn load_default(data_dir: &Path) -> Result<HostConfig, HostConfigError> {
        let path = data_dir.join(HOST_CONFIG_FILE);
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(HostConfig::default()),
            _ => HostConfig::load(&path),
        }
    }

    /// Parses the text of `path` (named in errors).
    pub fn parse(path: &Path, text: &str) -> Result<HostConfig, HostConfigError> {
        let config: HostConfig =
            toml::from_str(text).map_err(|source: toml::de::Error| HostConfigError::Syntax {
                path: path.to_path_buf(),
                line: source
                    .span()
                    .map(|span| text[..span.start.min(text.len())].lines().count().max(1)),
                source: Box::new(source),
            })?;
        if let Some(root) = config.egress.extra_roots.iter().find(|r| r.is_relative()) {
            return Err(HostConfigError::RelativeRoot {
                path: path.to_path_buf(),
                root: root.clone(),
            });
        }
        let min_free = config.storage.min_free_percent;
        if !(0.0..=50.0).contains(&min_free) {
            return Err(HostConfigError::MinFreeOutOfRange {
                path: path.to_path_buf(),
                value: min_free,
            });
        }
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<HostConfig, HostConfigError> {
        HostConfig::parse(Path::new("berth.toml"), text)
    }

    #[test]
    fn an_empty_file_is_the_defaults() {
        assert_eq!(parse("").unwrap(), HostConfig::default());
        let dir = Path::new("/var/lib/berth");
        assert_eq!(
            HostConfig::default().secrets.key_file(dir),
            dir.join("secrets.key")
        );
    }

    #[test]
    fn reads_every_setting() {
        let config = parse(
            r#"
[egress]
resolve_overrides = { "api.example.test" = "127.0.0.1:8443", "v6.example.test" = "[::1]:443" }
extra_roots = ["/etc/berth/ca.pem"]

[secrets]
key_file = "/etc/berth/secrets.key"

[storage]
min_free_percent = 10
"#,
        )
        .unwrap();
        assert_eq!(config.storage.min_free_percent, 10.0);
        assert_eq!(
            parse("").unwrap().storage.min_free_percent,
            crate::disk_space::DEFAULT_MIN_FREE_PERCENT
        );
        for bad in ["-1", "51", "nan"] {
            let err = parse(&format!("[storage]\nmin_free_percent = {bad}\n")).unwrap_err();
            assert!(
                matches!(err, HostConfigError::MinFreeOutOfRange { .. }),
                "{bad}: {err}"
            );
        }
        assert_eq!(
            config.egress.resolve_overrides["api.example.test"],
            "127.0.0.1:8443".parse().unwrap()
        );
        assert_eq!(
            config.egress.resolve_overrides["v6.example.test"],
            "[::1]:443".parse().unwrap()
        );
        assert_eq!(
            config.egress.extra_roots,
            [PathBuf::from("/etc/berth/ca.pem")]
        );
        assert_eq!(
            config.secrets.key_file(Path::new("/d")),
            PathBuf::from("/etc/berth/secrets.key")
        );
    }

    #[test]
    fn mistakes_name_the_line() {
        let cases = [
            (
                "[egress]\nresolve_overrides = { \"a.test\" = \"nope\" }\n",
                2,
            ),
            // An unknown key is reported at its table.
            ("\n[egress]\nallow = [\"x\"]\n", 2),
            ("\n\n[gateway]\n", 3),
        ];
        for (text, line) in cases {
            let err = parse(text).unwrap_err();
            let HostConfigError::Syntax { line: got, .. } = &err else {
                panic!("{text:?}: {err}");
            };
            assert_eq!(*got, Some(line), "{text:?}: {err}");
            assert!(
                err.to_string().starts_with(&format!("berth.toml:{line}: ")),
                "{err}"
            );
        }
    }

    #[test]
    fn extra_roots_must_be_absolute() {
        let err = parse("[egress]\nextra_roots = [\"ca.pem\"]\n").unwrap_err();
        assert!(matches!(err, HostConfigError::RelativeRoot { .. }), "{err}");
    }

    #[test]
    fn a_missing_default_file_is_fine_a_named_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            HostConfig::load_default(dir.path()).unwrap(),
            HostConfig::default()
        );
        let err = HostConfig::load(&dir.path().join("nope.toml")).unwrap_err();
        assert!(matches!(err, HostConfigError::Read { .. }), "{err}");
    }
}
