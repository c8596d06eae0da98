//! `[store]`: which database holds berth's records. Without it, SQLite in the data dir
//! (`berth.db`), the embedded default; with a `postgres://` URL, a PostgreSQL database
//! that several berth processes share.
//!
//! ```toml
//! [store]
//! url = "postgres://berth@db.internal:5432/berth"
//! # The password: this file, else $BERTH_STORE_PASSWORD, else $PGPASSWORD.
//! password_file = "/etc/berth/db-password"
//! max_connections = 16
//! ```
//!
//! A password is never taken from a URL: a URL ends up in `ps`, shell history and logs.

use std::path::{Path, PathBuf};

use berth_store::{PostgresOptions, Store, DB_FILE};
use serde::Deserialize;

/// Environment variables the password is read from, in order, when no file names it.
pub const PASSWORD_VARS: [&str; 2] = ["BERTH_STORE_PASSWORD", "PGPASSWORD"];

/// A password file larger than this is not a password.
const MAX_PASSWORD_BYTES: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreHostConfig {
    /// `None` (or `sqlite:`): `<data-dir>/berth.db`.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// Connections this process keeps to Postgres at most.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

impl Default for StoreHostConfig {
    fn default() -> Self {
        StoreHostConfig {
            url: None,
            password_file: None,
            max_connections: default_max_connections(),
        }
    }
}

fn default_max_connections() -> usize {
    PostgresOptions::default().max_connections
}

/// Why the store could not be opened as configured.
#[derive(Debug, thiserror::Error)]
pub enum StoreConfigError {
    #[error("the store URL {url:?} is neither postgres:// nor sqlite:")]
    Scheme { url: String },

    #[error(
        "the store URL holds a password; put it in [store] password_file or ${} instead",
        PASSWORD_VARS[0]
    )]
    PasswordInUrl,

    #[error("cannot read the store's password file {}", path.display())]
    PasswordFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the store's password file {} is larger than {MAX_PASSWORD_BYTES} bytes", path.display())]
    PasswordFileTooLarge { path: PathBuf },

    #[error(transparent)]
    Store(#[from] berth_store::StoreError),
}

/// Where the store is, as the config and `--store` said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    Sqlite(PathBuf),
    Postgres(String),
}

impl StoreLocation {
    /// The SQLite file, or the Postgres URL (which never holds a password).
    pub fn describe(&self) -> PathBuf {
        match self {
            StoreLocation::Sqlite(path) => path.clone(),
            StoreLocation::Postgres(url) => PathBuf::from(url),
        }
    }
}

impl StoreHostConfig {
    /// The store this config names for a daemon on `data_dir` (`berth up --store` sets
    /// `url`).
    pub fn location(&self, data_dir: &Path) -> Result<StoreLocation, StoreConfigError> {
        let url = self.url.as_deref().unwrap_or("sqlite:");
        if let Some(path) = url.strip_prefix("sqlite:") {
            return Ok(StoreLocation::Sqlite(if path.is_empty() {
                data_dir.join(DB_FILE)
            } else {
                PathBuf::from(path)
            }));
        }
        let Some(rest) = ["postgres://", "postgresql://"]
            .iter()
            .find_map(|scheme| url.strip_prefix(scheme))
        else {
            return Err(StoreConfigError::Scheme {
                url: url.to_owned(),
            });
        };
        let authority = rest.split('/').next().unwrap_or_default();
        let userinfo = authority.rsplit_once('@').map(|(userinfo, _)| userinfo);
        if userinfo.is_some_and(|u| u.contains(':')) || has_password_param(rest) {
            return Err(StoreConfigError::PasswordInUrl);
        }
        Ok(StoreLocation::Postgres(url.to_owned()))
    }

    /// The password for Postgres: the file, else the first variable of [`PASSWORD_VARS`]
    /// that is set, else none (the server may trust the connection).
    fn password(&self) -> Result<Option<String>, StoreConfigError> {
        if let Some(path) = &self.password_file {
            let read = |source| StoreConfigError::PasswordFile {
                path: path.clone(),
                source,
            };
            let len = std::fs::metadata(path).map_err(read)?.len();
            if len > MAX_PASSWORD_BYTES {
                return Err(StoreConfigError::PasswordFileTooLarge { path: path.clone() });
            }
            let text = std::fs::read_to_string(path).map_err(read)?;
            return Ok(Some(text.trim_end_matches(['\n', '\r']).to_owned()));
        }
        Ok(PASSWORD_VARS
            .iter()
            .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty())))
    }

    /// Opens the store (and applies its migrations).
    pub fn open(&self, location: &StoreLocation) -> Result<Store, StoreConfigError> {
        Ok(match location {
            StoreLocation::Sqlite(path) => Store::open(path)?,
            StoreLocation::Postgres(url) => Store::connect(
                url,
                self.password()?.as_deref(),
                &PostgresOptions {
                    max_connections: self.max_connections,
                },
            )?,
        })
    }
}

fn has_password_param(rest: &str) -> bool {
    rest.split_once('?').is_some_and(|(_, query)| {
        query
            .split('&')
            .any(|pair| pair.split('=').next() == Some("password"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_sqlite_in_the_data_dir_unless_a_url_says_otherwise() {
        let config = StoreHostConfig::default();
        let data = Path::new("/var/lib/berth");
        assert_eq!(
            config.location(data).unwrap(),
            StoreLocation::Sqlite(data.join(DB_FILE))
        );
        let config = StoreHostConfig {
            url: Some("postgres://berth@db/berth".into()),
            ..StoreHostConfig::default()
        };
        assert_eq!(
            config.location(data).unwrap(),
            StoreLocation::Postgres("postgres://berth@db/berth".into())
        );
        let config = StoreHostConfig {
            url: Some("sqlite:/tmp/x.db".into()),
            ..StoreHostConfig::default()
        };
        assert_eq!(
            config.location(data).unwrap(),
            StoreLocation::Sqlite("/tmp/x.db".into())
        );
    }

    #[test]
    fn a_password_in_a_url_or_an_unknown_scheme_is_refused() {
        let data = Path::new("/d");
        let at = |url: &str| {
            StoreHostConfig {
                url: Some(url.into()),
                ..StoreHostConfig::default()
            }
            .location(data)
        };
        for url in [
            "postgres://berth:hunter2@db/berth",
            "postgresql://berth:@db/berth",
            "postgres://berth@db/berth?sslmode=disable&password=hunter2",
        ] {
            assert!(
                matches!(at(url), Err(StoreConfigError::PasswordInUrl)),
                "{url}"
            );
        }
        assert!(matches!(
            at("mysql://db/berth"),
            Err(StoreConfigError::Scheme { .. })
        ));
    }

    #[test]
    fn the_password_comes_from_its_file_without_the_newline() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let config = StoreHostConfig {
            password_file: Some(file),
            ..StoreHostConfig::default()
        };
        assert_eq!(config.password().unwrap().as_deref(), Some("s3cret"));
        let missing = StoreHostConfig {
            password_file: Some(dir.path().join("nope")),
            ..StoreHostConfig::default()
        };
        assert!(matches!(
            missing.password(),
            Err(StoreConfigError::PasswordFile { .. })
        ));
    }
}
