//! Finding the daemon a client command talks to: `BERTH_URL` and `BERTH_API_KEY`, else the
//! files `berth up` writes into the data directory (`berth.url`, `admin.key`), and which
//! certificate an `https://` daemon must present (`berth.cert` for the local daemon).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::connector::Trust;
use crate::data_dir::{ADMIN_KEY_FILE, URL_FILE};

/// The certificate a TLS daemon serves, which the CLI on its host pins.
pub const CERT_FILE: &str = berth_server::tls::CERT_FILE;

/// The env var naming the daemon's base URL, e.g. `http://127.0.0.1:7070`.
pub const URL_ENV: &str = "BERTH_URL";
/// The env var holding the API key.
pub const API_KEY_ENV: &str = "BERTH_API_KEY";

/// A daemon's base URL: `http://host:port` or `https://host:port` (no path prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonUrl {
    /// `host:port`, what we connect to and send as `Host`.
    authority: String,
    /// `https://`: TLS on the connection.
    tls: bool,
}

impl DaemonUrl {
    pub fn authority(&self) -> &str {
        &self.authority
    }

    pub fn is_tls(&self) -> bool {
        self.tls
    }

    /// The host alone (no port, no IPv6 brackets): the name TLS checks.
    pub fn host(&self) -> &str {
        let host = match self.authority.rsplit_once(':') {
            Some((host, _port)) => host,
            None => &self.authority,
        };
        host.trim_start_matches('[').trim_end_matches(']')
    }
}

impl fmt::Display for DaemonUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.authority)
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

    #[error(
        "the daemon serves https but {} {problem}; wait until `berth up` has its certificate \
         (ACME may still be ordering it), or restart it",
        path.display()
    )]
    NoCert {
        path: PathBuf,
        problem: &'static str,
    },
}

impl DaemonUrl {
    /// Parses `http(s)://host:port`, with an optional `/`, or `host:port` (http assumed).
    pub fn parse(raw: &str, source_name: &str) -> Result<DaemonUrl, TargetError> {
        let bad = |reason| TargetError::BadUrl {
            url: raw.to_string(),
            source_name: source_name.to_string(),
            reason,
        };
        let trimmed = raw.trim();
        let (rest, tls) = if let Some(rest) = trimmed.strip_prefix("http://") {
            (rest, false)
        } else if let Some(rest) = trimmed.strip_prefix("https://") {
            (rest, true)
        } else if trimmed.contains("://") {
            return Err(bad("only http:// and https:// URLs are supported"));
        } else {
            (trimmed, false)
        };
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('/') || authority.contains('?') || authority.contains('#') {
            return Err(bad(
                "a path is not supported; give only http(s)://host:port",
            ));
        }
        if authority.contains('@') {
            return Err(bad(
                "credentials in the URL are not supported; use BERTH_API_KEY",
            ));
        }
        let uri: http::uri::Authority = authority.parse().map_err(|_| bad("not a host:port"))?;
        let authority = match (uri.port_u16(), tls) {
            (Some(_), _) => uri.as_str().to_string(),
            (None, false) => format!("{}:80", uri.as_str()),
            (None, true) => format!("{}:443", uri.as_str()),
        };
        Ok(DaemonUrl { authority, tls })
    }
}

/// Where the daemon is and how to authenticate to it.
#[derive(Debug, Clone)]
pub struct Target {
    pub url: DaemonUrl,
    pub api_key: String,
    /// Where the key came from, for the hint on `401`.
    pub key_source: String,
    /// The certificates an `https://` daemon may present (unused for `http://`).
    pub trust: Trust,
}

/// Resolves the target from the two env values (already read) and the data directory.
/// Each of the URL and the key is taken from its env var if set, else from its file.
pub fn resolve(
    url_env: Option<String>,
    key_env: Option<String>,
    data_dir: &Path,
) -> Result<Target, TargetError> {
    let url_path = data_dir.join(URL_FILE);
    let (url, local) = match url_env.filter(|v| !v.trim().is_empty()) {
        Some(raw) => {
            let url = DaemonUrl::parse(&raw, URL_ENV)?;
            // The same URL the local daemon wrote: it is that daemon, pinned the same way.
            let local = read_one_line(&url_path, |path| TargetError::NoUrl { path })
                .ok()
                .and_then(|raw| DaemonUrl::parse(&raw, "").ok())
                .is_some_and(|written| written == url);
            (url, local)
        }
        None => {
            let raw = read_one_line(&url_path, |path| TargetError::NoUrl { path })?;
            (
                DaemonUrl::parse(&raw, &url_path.display().to_string())?,
                true,
            )
        }
    };
    let trust = if url.is_tls() && local {
        Trust::Pinned(pinned_cert(&data_dir.join(CERT_FILE))?)
    } else {
        Trust::WebRoots
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
        trust,
    })
}

/// The leaf certificate in the local daemon's `berth.cert`.
fn pinned_cert(path: &Path) -> Result<rustls::pki_types::CertificateDer<'static>, TargetError> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(TargetError::NoCert {
                path: path.to_path_buf(),
                problem: "does not exist",
            })
        }
        Err(source) => {
            return Err(TargetError::Read {
                path: path.to_path_buf(),
                hint: "",
                source,
            })
        }
    };
    pem::parse_many(&text)
        .ok()
        .and_then(|blocks| blocks.into_iter().find(|b| b.tag() == "CERTIFICATE"))
        .map(|b| b.into_contents().into())
        .ok_or_else(|| TargetError::NoCert {
            path: path.to_path_buf(),
            problem: "holds no PEM certificate",
        })
}

impl Target {
    /// A daemon at `url` called without a key (a node joining with its token), its
    /// `https://` certificate checked against the public web roots.
    pub fn anonymous(url: &str) -> Result<Target, TargetError> {
        Ok(Target {
            url: DaemonUrl::parse(url, "--join")?,
            api_key: String::new(),
            key_source: "no key".into(),
            trust: Trust::WebRoots,
        })
    }
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
        let tls = DaemonUrl::parse("https://berth.example/", "t").unwrap();
        assert!(tls.is_tls());
        assert_eq!(tls.authority(), "berth.example:443");
        assert_eq!(tls.host(), "berth.example");
        assert_eq!(tls.to_string(), "https://berth.example:443");
        assert_eq!(
            DaemonUrl::parse("https://[::1]:7443", "t").unwrap().host(),
            "::1"
        );
        for bad in [
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

    #[test]
    fn the_local_https_daemon_is_pinned_to_its_cert_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(URL_FILE), "https://127.0.0.1:7443\n").unwrap();
        std::fs::write(dir.path().join(ADMIN_KEY_FILE), "k\n").unwrap();
        let err = resolve(None, None, dir.path()).unwrap_err();
        assert!(matches!(err, TargetError::NoCert { .. }), "{err}");

        let pem = pem::encode(&pem::Pem::new("CERTIFICATE", b"leaf".to_vec()));
        std::fs::write(dir.path().join(CERT_FILE), pem).unwrap();
        let pinned = Trust::Pinned(b"leaf".to_vec().into());
        assert_eq!(resolve(None, None, dir.path()).unwrap().trust, pinned);
        // The same URL through the env var is the same daemon.
        let t = resolve(Some("https://127.0.0.1:7443/".into()), None, dir.path()).unwrap();
        assert_eq!(t.trust, pinned);
        // Any other https URL is checked against the public roots.
        let t = resolve(Some("https://berth.example".into()), None, dir.path()).unwrap();
        assert_eq!(t.trust, Trust::WebRoots);
    }
}
