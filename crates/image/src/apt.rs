//! Fetching Debian packages through the host's apt (`apt-get download`, `dpkg -x`): the
//! kernel and busybox come from the same mirror the host already trusts and verifies.

use std::path::{Path, PathBuf};

use crate::error::io;
use crate::key::KeyBuilder;
use crate::tool::{APT_CACHE, APT_GET, DPKG};
use crate::{ImageError, ImageStore, Progress};

/// Where apt keeps its package lists; empty means `apt-get update` never ran.
const APT_LISTS: &str = "/var/lib/apt/lists";

/// The candidate version of a package, as apt's record shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AptRecord {
    pub package: String,
    pub version: String,
    pub depends: Vec<String>,
    pub size: Option<u64>,
}

/// apt's record of `package`'s candidate version. Runs `apt-get update` first when apt has
/// no package lists at all.
///
/// `apt-cache` takes about 1.4 s a call on this host (no `pkgcache.bin`), so answers are
/// remembered in `<images>/apt/<package>` together with a fingerprint of apt's lists and
/// sources: while those are unchanged the candidate cannot have changed, and a rebuild that
/// finds its image does not run apt at all.
pub(crate) fn candidate(
    store: &ImageStore,
    package: &str,
    progress: &dyn Progress,
) -> Result<AptRecord, ImageError> {
    validate_name(package)?;
    let memo = store.root().join("apt").join(package);
    let state = lists_fingerprint();
    if let Some(record) = read_memo(&memo, &state) {
        return Ok(record);
    }
    let record = candidate_uncached(package, progress)?;
    // After an `apt-get update` the lists changed: fingerprint them again.
    write_memo(&memo, &lists_fingerprint(), &record);
    Ok(record)
}

fn candidate_uncached(package: &str, progress: &dyn Progress) -> Result<AptRecord, ImageError> {
    let show = |package: &str| -> Result<Option<AptRecord>, ImageError> {
        let mut cmd = APT_CACHE.command()?;
        cmd.args(["show", "--no-all-versions", package]);
        match APT_CACHE.run(&mut cmd) {
            Ok(out) => Ok(parse_record(&String::from_utf8_lossy(&out))),
            Err(ImageError::ToolFailed { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    };
    if let Some(record) = show(package)? {
        return Ok(record);
    }
    if lists_are_empty() {
        update(progress)?;
        if let Some(record) = show(package)? {
            return Ok(record);
        }
    }
    Err(ImageError::UnknownPackage {
        package: package.into(),
    })
}

/// Downloads `package` at `version` into `workdir` (apt needs a writable cwd) and unpacks
/// it with `dpkg -x` into `dest`. Retries once after `apt-get update` when the mirror no
/// longer has that version (stale lists).
pub(crate) fn fetch_and_unpack(
    record: &AptRecord,
    workdir: &Path,
    dest: &Path,
    progress: &dyn Progress,
) -> Result<PathBuf, ImageError> {
    progress.stage(&format!("download {} {}", record.package, record.version));
    progress.bytes(0, record.size);
    let deb = match download(record, workdir) {
        Ok(deb) => deb,
        Err(_) => {
            update(progress)?;
            download(record, workdir)
                .map_err(|e| no_mirror(format!("apt-get download {}", record.package), e))?
        }
    };
    let len = deb.metadata().map(|m| m.len()).ok();
    if let Some(len) = len {
        progress.bytes(len, Some(len));
    }
    progress.stage(&format!("unpack {}", record.package));
    let mut cmd = DPKG.command()?;
    cmd.arg("-x").arg(&deb).arg(dest);
    DPKG.run(&mut cmd)?;
    Ok(deb)
}

fn download(record: &AptRecord, workdir: &Path) -> Result<PathBuf, ImageError> {
    let mut cmd = APT_GET.command()?;
    cmd.args(["download", "-q"])
        .arg(format!("{}={}", record.package, record.version))
        .current_dir(workdir);
    APT_GET.run(&mut cmd)?;
    // apt names it <package>_<version with ':' as %3a>_<arch>.deb.
    let prefix = format!("{}_", record.package);
    let entries = std::fs::read_dir(workdir).map_err(io("read the directory", workdir))?;
    entries
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".deb"))
        })
        .ok_or(ImageError::Io {
            action: "find the downloaded package in",
            path: workdir.into(),
            source: std::io::ErrorKind::NotFound.into(),
        })
}

/// `apt-get update`; failing means the mirror is out of reach.
fn update(progress: &dyn Progress) -> Result<(), ImageError> {
    progress.stage("apt-get update");
    let mut cmd = APT_GET.command()?;
    cmd.args(["update", "-q"]);
    APT_GET
        .run(&mut cmd)
        .map(drop)
        .map_err(|e| no_mirror("apt-get update".into(), e))
}

fn no_mirror(step: String, err: ImageError) -> ImageError {
    match err {
        ImageError::ToolFailed { stderr, .. } => ImageError::NoMirror { step, stderr },
        other => other,
    }
}

/// Names, sizes and mtimes of apt's lists and sources: what the candidate depends on.
fn lists_fingerprint() -> String {
    use std::os::unix::fs::MetadataExt;
    let mut key = KeyBuilder::new("apt-state");
    for dir in [
        APT_LISTS,
        "/etc/apt",
        "/etc/apt/sources.list.d",
        "/etc/apt/preferences.d",
    ] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<_> = entries
            .flatten()
            .filter_map(|e| Some((e.file_name(), e.metadata().ok()?)))
            .filter(|(_, m)| m.is_file())
            .collect();
        files.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, meta) in files {
            key = key.field(
                dir,
                format!(
                    "{}:{}:{}.{}",
                    name.to_string_lossy(),
                    meta.len(),
                    meta.mtime(),
                    meta.mtime_nsec()
                ),
            );
        }
    }
    key.finish().to_string()
}

/// Memo lines: fingerprint, package, version, size (or empty), depends joined by `,`.
fn read_memo(path: &Path, state: &str) -> Option<AptRecord> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut lines = text.lines();
    if lines.next()? != state {
        return None;
    }
    let package = lines.next()?.to_string();
    let version = lines.next()?.to_string();
    let size = lines.next()?.parse().ok();
    let depends = lines
        .next()
        .unwrap_or("")
        .split(',')
        .filter(|d| !d.is_empty())
        .map(String::from)
        .collect();
    Some(AptRecord {
        package,
        version,
        depends,
        size,
    })
}

/// Best effort: without the memo the next build asks apt again.
fn write_memo(path: &Path, state: &str, r: &AptRecord) {
    let text = format!(
        "{state}\n{}\n{}\n{}\n{}\n",
        r.package,
        r.version,
        r.size.map(|s| s.to_string()).unwrap_or_default(),
        r.depends.join(",")
    );
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let _ = berth_basics::write_atomically(path, text.as_bytes(), 0o644);
}

fn lists_are_empty() -> bool {
    std::fs::read_dir(APT_LISTS).map_or(true, |entries| {
        !entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().contains("_Packages"))
    })
}

/// Package names as Debian allows them: lower-case alphanumerics and `+-.`, no leading `-`
/// (so a name never becomes an option).
pub(crate) fn validate_name(package: &str) -> Result<(), ImageError> {
    let ok = package.len() >= 2
        && package.starts_with(|c: char| c.is_ascii_alphanumeric())
        && package
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ImageError::Invalid {
            what: "Debian package name",
            value: package.into(),
            why: "lower-case letters, digits and + - . only",
        })
    }
}

/// Parses the first stanza of `apt-cache show`.
fn parse_record(text: &str) -> Option<AptRecord> {
    let field = |name: &str| {
        text.lines()
            .take_while(|l| !l.is_empty())
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::trim))
    };
    let depends = field("Depends")
        .map(|d| {
            d.split(',')
                .filter_map(|alt| alt.split('|').next())
                .map(|p| p.split('(').next().unwrap_or("").trim().to_string())
                .filter(|p| !p.is_empty())
                .collect()
        })
        .unwrap_or_default();
    Some(AptRecord {
        package: field("Package")?.to_string(),
        version: field("Version")?.to_string(),
        depends,
        size: field("Size").and_then(|s| s.parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_apt_record() {
        let text = "Package: linux-image-cloud-amd64\nSource: linux-signed-amd64 (6.1.192+3)\n\
            Version: 6.1.192-3\nDepends: linux-image-6.1.0-57-cloud-amd64 (= 6.1.192-3), a | b\n\
            Size: 1496\n\nPackage: other\nVersion: 1\n";
        let r = parse_record(text).unwrap();
        assert_eq!(r.package, "linux-image-cloud-amd64");
        assert_eq!(r.version, "6.1.192-3");
        assert_eq!(r.depends, ["linux-image-6.1.0-57-cloud-amd64", "a"]);
        assert_eq!(r.size, Some(1496));
        assert!(parse_record("E: nothing\n").is_none());
    }

    #[test]
    fn memo_round_trips_and_is_dropped_when_apt_state_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("apt/pkg");
        let r = AptRecord {
            package: "pkg".into(),
            version: "1:2.3-4".into(),
            depends: vec!["a".into(), "b".into()],
            size: Some(42),
        };
        write_memo(&path, "state1", &r);
        assert_eq!(read_memo(&path, "state1"), Some(r.clone()));
        assert_eq!(read_memo(&path, "state2"), None);
        let none = AptRecord {
            depends: vec![],
            size: None,
            ..r
        };
        write_memo(&path, "s", &none);
        assert_eq!(read_memo(&path, "s"), Some(none));
        assert_eq!(lists_fingerprint(), lists_fingerprint());
    }

    #[test]
    fn package_names_cannot_be_options_or_paths() {
        for ok in ["busybox-static", "linux-image-6.1.0-57-cloud-amd64", "g++"] {
            validate_name(ok).unwrap();
        }
        for bad in ["-o", "a/b", "Busybox", "x", "a b", "a=1"] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }
}
