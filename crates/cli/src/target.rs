//! Finding the daemon a client command talks to: `BERTH_URL` and `BERTH_API_KEY`, else the
//! files `berth up` writes into the data directory (`berth.url`, `admin.key`).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::data_dir::{ADMIN_KEY_FILE, URL_FILE};

/// The env var naming the daemon's base URL, e.g. `http://127.0.0.1:7070`.
pub const URL_ENV: &str = "BERTH_URL";
/// The env var holding the API key.
pub const API_KEY_ENV: &str = "BERTH_API_KEY";

/// A daemon's base URL: plain `http://host:port` (no TLS yet, no path prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonUrl {
    /// `host:port`, what we connect to and send as `Host`.
    authority: String,
}

impl DaemonUrl {
    pub fn authority(&self) -> &str {
        &self.authority
    }
}

impl fmt::Display for DaemonUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.authority)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("invalid daemon URL {url:?} (from {source_name}): {reason}")]
    BadUrl {
        url: String,
        source_name: String,
        reason: &'static str,
    },

    #[error(
        "no daemon address: {URL_ENV} is not set and {} does not exist; run `berth up` \
         (or pass the same --data-dir as `berth up`), or set {URL_ENV} and {API_KEY_ENV}",
        path.display()
    )]
    NoUrl { path: PathBuf },

    #[error(
        "no API key: {API_KEY_ENV} is not set and {} does not exist; run `berth up` \
         (or pass the same --data-dir as `berth up`), or set {API_KEY_ENV}",
        path.display()
    )]
    NoKey { path: PathBuf },

    #[error("cannot read {}{hint}", path.display())]
    Read {
        path: PathBuf,
        hint: &'static str,
        #[source]
        source: std::io::Error,
    },

    #[error("{} is empty", path.display())]
    Empty { path: PathBuf },
}

impl DaemonUrl {
    /// Parses `http://host:port`, `http://host:port/` or `host:port` (http assumed).
    pub fn parse(raw: &str, source_name: &str) -> Result<DaemonUrl, TargetError> {
        let bad = |reason| TargetError::BadUrl {
            url: raw.to_string(),
            source_name: source_name.to_string(),
            reason,
        };
        let trimmed = raw.trim();
        let rest = if let Some(rest) = trimmed.strip_prefix("http://") {
            rest
        } else if trimmed.starts_with("https://") {
            return Err(bad("https is not supported yet; use http://"));
        } else if trimmed.contains("://") {
            return Err(bad("only http:// URLs are supported"));
        } else {
            trimmed
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('/') || authority.contains('?') || authority.contains('#') {
            return Err(bad("a path is not supported; give only http://host:port"));
        }
        if authority.contains('@') {
            return Err(bad(
                "credentials in the URL are not supported; use BERTH_API_KEY",
            ));
        }
        let uri: http::uri::Authority = authority.parse().map_err(|_| bad("not a host:port"))?;
        let authority = match uri.port_u16() {
            Some(_) => uri.as_str().to_string(),
            None => format!("{}:80", uri.as_str()),
        };
        Ok(DaemonUrl { authority })
    }
}

/// Where the daemon is and how to authenticate to it.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: DaemonUrl,
    pub api_key: String,
    /// Where the key came from, for the hint on `401`.
    pub key_source: String,
}

/// Resolves the target from the two env values (already read) and the data directory.
/// Each of the URL and the key is taken from its env var if set, else from its file.
pub fn resolve(
    url_env: Option<String>,
    key_env: Option<String>,
    data_dir: &Path,
) -> Result<Target, TargetError> {
    let url = match url_env.filter(|v| !v.trim().is_empty()) {
        Some(raw) => DaemonUrl::parse(&raw, URL_ENV)?,
        None => {
            let path = data_dir.join(URL_FILE);
            let raw = read_one_line(&path, |path| TargetError::NoUrl { path })?;
            DaemonUrl::parse(&raw, &path.display().to_string())?
        }
    };
    let (api_key, key_source) = match key_env.filter(|v| !v.trim().is_empty()) {
        Some(key) => (key.trim().to_string(), API_KEY_ENV.to_string()),
        None => {
            let path = data_dir.join(ADMIN_KEY_FILE);
            let key = read_one_line(&path, |path| TargetError::NoKey { path })?;
            (key, path.display().to_string())
        }
    };
    Ok(Target {
        url,
        api_key,
        key_source,
    })
}

/// Resolves the target from the real environment.
pub fn from_env(data_dir: &Path) -> Result<Target, TargetError> {
    resolve(
        std::env::var(URL_ENV).ok(),
        std::env::var(API_KEY_ENV).ok(),
        data_dir,
    )
}

fn read_one_line(
    path: &Path,
    missing: impl FnOnce(PathBuf) -> TargetError,
) -> Result<String, TargetError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(missing(path.to_path_buf()))
        }
        Err(e) => {
            let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
                " (run as the user that runs `berth up`, or set BERTH_URL and BERTH_API_KEY)"
            } else {
                ""
            };
            return Err(TargetError::Read {
                path: path.to_path_buf(),
                hint,
                source: e,
            });
        }
    };
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        return Err(TargetError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(line.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_or_without_scheme() {
        assert_eq!(
            DaemonUrl::parse("http://127.0.0.1:7070", "t")
                .unwrap()
                .authority(),
            "127.0.0.1:7070"
        );
        assert_eq!(
            DaemonUrl::parse("http://localhost:1/\n", "t")
                .unwrap()
                .authority(),
            "localhost:1"
        );
        assert_eq!(
            DaemonUrl::parse("127.0.0.1:9", "t").unwrap().to_string(),
            "http://127.0.0.1:9"
        );
        assert_eq!(
            DaemonUrl::parse("http://[::1]:7070", "t")
                .unwrap()
                .authority(),
            "[::1]:7070"
        );
        assert_eq!(
            DaemonUrl::parse("http://example", "t").unwrap().authority(),
            "example:80"
        );
        for bad in [
            "https://x:1",
            "ftp://x",
            "http://",
            "http://x:1/api",
            "http://u:p@x:1",
            "x y",
        ] {
            assert!(DaemonUrl::parse(bad, "t").is_err(), "{bad}");
        }
    }

    #[test]
    fn env_wins_over_data_dir_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(URL_FILE), "http://127.0.0.1:1111\n").unwrap();
        std::fs::write(dir.path().join(ADMIN_KEY_FILE), "berth_file\n").unwrap();

        let t = resolve(
            Some("http://127.0.0.1:2222".into()),
            Some("berth_env".into()),
            dir.path(),
        )
        .unwrap();
        assert_eq!(t.url.authority(), "127.0.0.1:2222");
        assert_eq!(t.api_key, "berth_env");
        assert_eq!(t.key_source, API_KEY_ENV);

        let t = resolve(None, None, dir.path()).unwrap();
        assert_eq!(t.url.authority(), "127.0.0.1:1111");
        assert_eq!(t.api_key, "berth_file");

        // Each is resolved on its own; an empty env var counts as unset.
        let t = resolve(Some(" ".into()), Some("berth_env".into()), dir.path()).unwrap();
        assert_eq!(t.url.authority(), "127.0.0.1:1111");
        assert_eq!(t.api_key, "berth_env");
    }

    #[test]
    fn missing_files_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve(None, None, dir.path()).unwrap_err();
        assert!(matches!(err, TargetError::NoUrl { .. }));
        let msg = err.to_string();
        assert!(
            msg.contains("berth up") && msg.contains("BERTH_URL"),
            "{msg}"
        );

        let err = resolve(Some("http://127.0.0.1:1".into()), None, dir.path()).unwrap_err();
        assert!(matches!(err, TargetError::NoKey { .. }), "{err}");

        std::fs::write(dir.path().join(URL_FILE), "\n").unwrap();
        let err = resolve(None, Some("k".into()), dir.path()).unwrap_err();
        assert!(matches!(err, TargetError::Empty { .. }), "{err}");
    }
}
