//! Read-only shared layers: where in a box a layer may go, and what a layer's host
//! directory must be. Backend-independent, so the template registry checks templates with
//! the same rules the runtime applies at start.
//!
//! A target is an absolute, normalized path that is neither `/` nor anything berth mounts
//! itself: not under (or equal to) [`RESERVED_TARGETS`], and not an ancestor of one (a layer
//! at `/home` would hide `/home/user`). Layers of one box may not nest or repeat.

use std::path::{Path, PathBuf};

use crate::Layer;

/// Paths berth mounts in every box (or that are views of the host's `/usr`). A layer may not
/// be at, under, or above any of them.
pub const RESERVED_TARGETS: &[&str] = &[
    "/proc",
    "/sys",
    "/dev",
    "/run/berth",
    "/home/user",
    "/memory",
    "/var/lib/berth",
    "/.berth",
    // The host's /usr and the top-level links merged-/usr hosts make into it.
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
];

/// Longest target accepted (well under `PATH_MAX`).
pub const MAX_TARGET_LEN: usize = 1024;

/// Why a layer's target is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("must be an absolute path")]
    NotAbsolute,
    #[error("must be normalized: no empty, `.` or `..` component and no trailing `/`")]
    NotNormalized,
    #[error("must be at most {MAX_TARGET_LEN} bytes and hold no NUL")]
    BadBytes,
    #[error("must not be `/`")]
    Root,
    #[error("is under {reserved}, which berth mounts itself")]
    Reserved { reserved: &'static str },
    #[error("would hide {reserved}, which berth mounts itself")]
    HidesReserved { reserved: &'static str },
}

/// Why a layer (or a set of layers) is not acceptable.
#[derive(Debug, thiserror::Error)]
pub enum LayerError {
    #[error("target {target:?} {reason}")]
    Target { target: String, reason: TargetError },
    #[error("source {} must be an absolute path", source_dir.display())]
    SourceNotAbsolute { source_dir: PathBuf },
    #[error("source {} is not a directory", source_dir.display())]
    SourceNotDirectory { source_dir: PathBuf },
    #[error("source {}: {error}", source_dir.display())]
    SourceUnreadable {
        source_dir: PathBuf,
        error: std::io::Error,
    },
    #[error("target {target:?} overlaps the target {other:?} of another layer (layers may not repeat or nest)")]
    Overlap { target: String, other: String },
}

/// Checks where a layer goes in the box.
pub fn check_target(target: &str) -> Result<(), TargetError> {
    if target.len() > MAX_TARGET_LEN || target.contains('\0') {
        return Err(TargetError::BadBytes);
    }
    let Some(rest) = target.strip_prefix('/') else {
        return Err(TargetError::NotAbsolute);
    };
    if rest.is_empty() {
        return Err(TargetError::Root);
    }
    if rest
        .split('/')
        .any(|part| part.is_empty() || part == "." || part == "..")
    {
        return Err(TargetError::NotNormalized);
    }
    for &reserved in RESERVED_TARGETS {
        if is_at_or_under(target, reserved) {
            return Err(TargetError::Reserved { reserved });
        }
        if is_at_or_under(reserved, target) {
            return Err(TargetError::HidesReserved { reserved });
        }
    }
    Ok(())
}

/// Checks a layer's host directory: absolute, exists, a directory (links are followed: the
/// source is the host operator's, not the box's).
pub fn check_source(source: &Path) -> Result<(), LayerError> {
    if !source.is_absolute() {
        return Err(LayerError::SourceNotAbsolute {
            source_dir: source.into(),
        });
    }
    match std::fs::metadata(source) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(LayerError::SourceNotDirectory {
            source_dir: source.into(),
        }),
        Err(error) => Err(LayerError::SourceUnreadable {
            source_dir: source.into(),
            error,
        }),
    }
}

/// Checks one layer: its target and its source.
pub fn check_layer(layer: &Layer) -> Result<(), LayerError> {
    check_target(&layer.target).map_err(|reason| LayerError::Target {
        target: layer.target.clone(),
        reason,
    })?;
    check_source(&layer.source)
}

/// Checks the layers of one box: each one, and that no two share or nest their targets.
pub fn check_layers(layers: &[Layer]) -> Result<(), (usize, LayerError)> {
    for (i, layer) in layers.iter().enumerate() {
        check_layer(layer).map_err(|e| (i, e))?;
        if let Some(other) = layers[..i].iter().find(|o| {
            is_at_or_under(&layer.target, &o.target) || is_at_or_under(&o.target, &layer.target)
        }) {
            return Err((
                i,
                LayerError::Overlap {
                    target: layer.target.clone(),
                    other: other.target.clone(),
                },
            ));
        }
    }
    Ok(())
}

/// `path` is `base` or below it (both normalized and absolute).
fn is_at_or_under(path: &str, base: &str) -> bool {
    path == base
        || path
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_must_be_absolute_normalized_and_clear_of_berths_mounts() {
        for good in [
            "/opt/harness",
            "/mnt/skills/pdf",
            "/srv",
            "/etc/agent",
            "/tmp/x",
        ] {
            assert_eq!(check_target(good), Ok(()), "{good}");
        }
        for (bad, want) in [
            ("opt/harness", TargetError::NotAbsolute),
            ("", TargetError::NotAbsolute),
            ("/", TargetError::Root),
            ("/opt/", TargetError::NotNormalized),
            ("//opt", TargetError::NotNormalized),
            ("/opt/./x", TargetError::NotNormalized),
            ("/opt/../proc", TargetError::NotNormalized),
            ("/opt\0x", TargetError::BadBytes),
            ("/proc", TargetError::Reserved { reserved: "/proc" }),
            ("/proc/sys", TargetError::Reserved { reserved: "/proc" }),
            ("/dev/x", TargetError::Reserved { reserved: "/dev" }),
            ("/sys/fs", TargetError::Reserved { reserved: "/sys" }),
            (
                "/run/berth/x",
                TargetError::Reserved {
                    reserved: "/run/berth",
                },
            ),
            (
                "/home/user/bin",
                TargetError::Reserved {
                    reserved: "/home/user",
                },
            ),
            (
                "/memory",
                TargetError::Reserved {
                    reserved: "/memory",
                },
            ),
            (
                "/var/lib/berth",
                TargetError::Reserved {
                    reserved: "/var/lib/berth",
                },
            ),
            (
                "/.berth/x",
                TargetError::Reserved {
                    reserved: "/.berth",
                },
            ),
            ("/usr/local/x", TargetError::Reserved { reserved: "/usr" }),
            (
                "/home",
                TargetError::HidesReserved {
                    reserved: "/home/user",
                },
            ),
            (
                "/run",
                TargetError::HidesReserved {
                    reserved: "/run/berth",
                },
            ),
            (
                "/var",
                TargetError::HidesReserved {
                    reserved: "/var/lib/berth",
                },
            ),
        ] {
            assert_eq!(check_target(bad), Err(want), "{bad:?}");
        }
        assert_eq!(
            check_target(&format!("/{}", "a".repeat(2000))),
            Err(TargetError::BadBytes)
        );
        // A prefix that is not a path prefix is fine.
        assert_eq!(check_target("/procfs"), Ok(()));
        assert_eq!(check_target("/memory-bank"), Ok(()));
    }

    #[test]
    fn sources_must_be_existing_directories_and_targets_must_not_nest() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let layer = |source: &Path, target: &str| Layer {
            source: source.into(),
            target: target.into(),
        };
        assert!(check_layer(&layer(dir.path(), "/opt/a")).is_ok());
        assert!(matches!(
            check_layer(&layer(&file, "/opt/a")),
            Err(LayerError::SourceNotDirectory { .. })
        ));
        assert!(matches!(
            check_layer(&layer(&dir.path().join("none"), "/opt/a")),
            Err(LayerError::SourceUnreadable { .. })
        ));
        assert!(matches!(
            check_layer(&layer(Path::new("rel"), "/opt/a")),
            Err(LayerError::SourceNotAbsolute { .. })
        ));
        let err = check_layer(&layer(dir.path(), "/proc/x")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "target \"/proc/x\" is under /proc, which berth mounts itself"
        );
        let d = dir.path();
        assert!(check_layers(&[layer(d, "/opt/a"), layer(d, "/opt/ab")]).is_ok());
        for pair in [
            ["/opt/a", "/opt/a"],
            ["/opt/a", "/opt/a/b"],
            ["/opt/a/b", "/opt/a"],
        ] {
            let (i, e) = check_layers(&[layer(d, pair[0]), layer(d, pair[1])]).unwrap_err();
            assert_eq!(i, 1);
            assert!(matches!(e, LayerError::Overlap { .. }), "{pair:?}");
        }
    }
}
