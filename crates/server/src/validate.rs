//! Checks on client input that do not need the store or a box.

use berth_runtime::{Limits, Rootfs};

use crate::error::OpError;

/// The templates this build knows.
pub const TEMPLATES: &[&str] = &["host"];
pub const DEFAULT_TEMPLATE: &str = "host";

/// A box name: a DNS label (1–63 of `a-z`, `0-9`, `-`, not starting or ending with `-`).
pub fn box_name(name: &str) -> Result<(), OpError> {
    let rule = if name.is_empty() || name.len() > 63 {
        Some("a name has 1 to 63 characters")
    } else if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        Some("a name uses only a-z, 0-9 and -")
    } else if name.starts_with('-') || name.ends_with('-') {
        Some("a name does not start or end with -")
    } else {
        None
    };
    match rule {
        Some(rule) => Err(OpError::InvalidName {
            name: name.to_owned(),
            rule,
        }),
        None => Ok(()),
    }
}

/// The root filesystem of a template.
pub fn template_rootfs(template: &str) -> Result<Rootfs, OpError> {
    match template {
        "host" => Ok(Rootfs::Host),
        _ => Err(OpError::UnknownTemplate {
            template: template.to_owned(),
            available: TEMPLATES,
        }),
    }
}

/// Limits given by a client, each optional.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LimitsInput {
    pub memory_mib: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
}

/// Fills defaults and checks ranges (docs/api.md).
pub fn limits(input: LimitsInput) -> Result<Limits, OpError> {
    let defaults = Limits::default();
    let out = Limits {
        memory_mib: input.memory_mib.unwrap_or(defaults.memory_mib),
        pids: input.pids.unwrap_or(defaults.pids),
        cpus: input.cpus.unwrap_or(defaults.cpus),
    };
    range("memory_mib", out.memory_mib as f64, 64.0, 65536.0)?;
    range("pids", out.pids as f64, 16.0, 65536.0)?;
    range("cpus", out.cpus, 0.1, 256.0)?;
    Ok(out)
}

fn range(field: &'static str, value: f64, min: f64, max: f64) -> Result<(), OpError> {
    // `!(a && b)` also refuses NaN.
    if !(value >= min && value <= max) {
        return Err(OpError::LimitOutOfRange {
            field,
            value,
            min,
            max,
        });
    }
    Ok(())
}

/// A path inside the box: absolute, no NUL, at most 4096 bytes.
pub fn box_path(path: &str) -> Result<(), OpError> {
    let rule = if !path.starts_with('/') {
        Some("the path must be absolute")
    } else if path.contains('\0') {
        Some("the path must not contain NUL")
    } else if path.len() > 4096 {
        Some("the path is longer than 4096 bytes")
    } else {
        None
    };
    match rule {
        Some(rule) => Err(OpError::InvalidPath {
            path: path.replace('\0', "\\0"),
            rule,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_dns_label_rules() {
        for good in ["a", "alice", "a-1", "0", &"x".repeat(63)] {
            assert!(box_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "Alice",
            "a_b",
            "a.b",
            "é",
            &"x".repeat(64),
            "bx_aaaa",
        ] {
            assert!(
                matches!(box_name(bad), Err(OpError::InvalidName { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn limits_get_defaults_and_ranges() {
        assert_eq!(limits(LimitsInput::default()).unwrap(), Limits::default());
        assert!(limits(LimitsInput {
            memory_mib: Some(63),
            ..Default::default()
        })
        .is_err());
        assert!(limits(LimitsInput {
            pids: Some(65537),
            ..Default::default()
        })
        .is_err());
        assert!(limits(LimitsInput {
            cpus: Some(f64::NAN),
            ..Default::default()
        })
        .is_err());
        assert!(limits(LimitsInput {
            cpus: Some(0.05),
            ..Default::default()
        })
        .is_err());
        let l = limits(LimitsInput {
            memory_mib: Some(64),
            pids: Some(65536),
            cpus: Some(256.0),
        })
        .unwrap();
        assert_eq!((l.memory_mib, l.pids, l.cpus), (64, 65536, 256.0));
    }

    #[test]
    fn only_the_host_template_exists() {
        assert_eq!(template_rootfs("host").unwrap(), Rootfs::Host);
        let err = template_rootfs("ubuntu").unwrap_err();
        assert!(err.to_string().contains("available: host"), "{err}");
    }

    #[test]
    fn paths_are_absolute_without_nul() {
        assert!(box_path("/home/user/a.txt").is_ok());
        assert!(box_path("a.txt").is_err());
        assert!(box_path("/a\0b").is_err());
        assert!(box_path("").is_err());
    }
}
