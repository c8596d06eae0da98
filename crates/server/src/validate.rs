//! Checks on client input that do not need the store or a box.

use berth_runtime::{Capabilities, Limits};
use berth_store::SleepSettings;
use std::ops::RangeInclusive;

use crate::dns_label::label_rule;
use crate::error::OpError;

/// The template of a box whose creation names none.
pub const DEFAULT_TEMPLATE: &str = "host";
/// The template of a box on a VM runtime when none is named.
pub const DEFAULT_VM_TEMPLATE: &str = "minimal";

/// A box name: a DNS label (1–63 of `a-z`, `0-9`, `-`, not starting or ending with `-`).
pub fn box_name(name: &str) -> Result<(), OpError> {
    match label_rule(name) {
        Some(rule) => Err(OpError::InvalidName {
            name: name.to_owned(),
            rule,
        }),
        None => Ok(()),
    }
}

/// A tenant name: the same rules as a box name.
pub fn tenant_name(name: &str) -> Result<(), OpError> {
    match label_rule(name) {
        Some(rule) => Err(OpError::InvalidTenantName {
            name: name.to_owned(),
            rule,
        }),
        None => Ok(()),
    }
}

/// The ranges of docs/api.md, for a box's limits and a template's defaults alike.
pub const MEMORY_MIB_RANGE: RangeInclusive<u64> = 64..=65_536;
pub const PIDS_RANGE: RangeInclusive<u64> = 16..=65_536;
/// A box volume: 64 MiB to 1 TiB (a sparse file until written).
pub const DISK_MIB_RANGE: RangeInclusive<u64> = 64..=1_048_576;
pub const CPUS_RANGE: RangeInclusive<f64> = 0.1..=256.0;

/// Limits given by a client, each optional.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LimitsInput {
    pub memory_mib: Option<u64>,
    pub pids: Option<u64>,
    pub cpus: Option<f64>,
}

/// Fills defaults and checks ranges (docs/api.md).
pub fn limits(input: LimitsInput) -> Result<Limits, OpError> {
    limits_over(Limits::default(), input)
}

/// Fills what the client left out from `defaults` (a template's) and checks ranges.
pub fn limits_over(defaults: Limits, input: LimitsInput) -> Result<Limits, OpError> {
    let out = Limits {
        memory_mib: input.memory_mib.unwrap_or(defaults.memory_mib),
        pids: input.pids.unwrap_or(defaults.pids),
        cpus: input.cpus.unwrap_or(defaults.cpus),
    };
    let as_f64 = |r: &RangeInclusive<u64>| (*r.start() as f64, *r.end() as f64);
    let (min, max) = as_f64(&MEMORY_MIB_RANGE);
    range("memory_mib", out.memory_mib as f64, min, max)?;
    let (min, max) = as_f64(&PIDS_RANGE);
    range("pids", out.pids as f64, min, max)?;
    range("cpus", out.cpus, *CPUS_RANGE.start(), *CPUS_RANGE.end())?;
    Ok(out)
}

/// Each rung of a box's sleep ladder, in idle seconds: off (0) or up to a week.
pub const SLEEP_RUNG_RANGE: std::ops::RangeInclusive<u64> = 0..=604_800;

/// The rungs a client gives, each `None` to keep what the box (or its template) has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SleepInput {
    pub pause_after_s: Option<u64>,
    pub snapshot_after_s: Option<u64>,
    pub stop_after_s: Option<u64>,
    pub auto_resume: Option<bool>,
}

impl SleepInput {
    pub fn is_empty(&self) -> bool {
        *self == SleepInput::default()
    }

    /// `base` with what this input sets.
    pub fn over(self, base: SleepSettings) -> SleepSettings {
        SleepSettings {
            pause_after_s: self.pause_after_s.unwrap_or(base.pause_after_s),
            snapshot_after_s: self.snapshot_after_s.unwrap_or(base.snapshot_after_s),
            stop_after_s: self.stop_after_s.unwrap_or(base.stop_after_s),
            auto_resume: self.auto_resume.unwrap_or(base.auto_resume),
        }
    }
}

/// A template's ladder as a box on `caps` takes it: the rungs the runtime lacks are off.
pub fn template_sleep(template: SleepSettings, caps: Capabilities) -> SleepSettings {
    SleepSettings {
        pause_after_s: if caps.pause {
            template.pause_after_s
        } else {
            0
        },
        snapshot_after_s: if caps.snapshot {
            template.snapshot_after_s
        } else {
            0
        },
        ..template
    }
}

/// A box's sleep ladder: each rung in [`SLEEP_RUNG_RANGE`], in order, and only rungs its
/// runtime has (a template's rung a runtime lacks is skipped instead: the template does not
/// know which runtime a box picks).
pub fn sleep(
    sleep: SleepSettings,
    runtime: &str,
    caps: Capabilities,
) -> Result<SleepSettings, OpError> {
    for (field, value) in [
        ("pause_after_s", sleep.pause_after_s),
        ("snapshot_after_s", sleep.snapshot_after_s),
        ("stop_after_s", sleep.stop_after_s),
    ] {
        range(
            field,
            value as f64,
            *SLEEP_RUNG_RANGE.start() as f64,
            *SLEEP_RUNG_RANGE.end() as f64,
        )?;
    }
    sleep.in_order()?;
    for (field, value, has) in [
        ("pause_after_s", sleep.pause_after_s, caps.pause),
        ("snapshot_after_s", sleep.snapshot_after_s, caps.snapshot),
    ] {
        if value > 0 && !has {
            return Err(OpError::RungUnsupported {
                field,
                runtime: runtime.to_owned(),
            });
        }
    }
    Ok(sleep)
}

/// A box's own volume size, in [`DISK_MIB_RANGE`].
pub fn disk_mib(value: u64) -> Result<u64, OpError> {
    if DISK_MIB_RANGE.contains(&value) {
        Ok(value)
    } else {
        Err(OpError::DiskOutOfRange {
            value,
            min: *DISK_MIB_RANGE.start(),
            max: *DISK_MIB_RANGE.end(),
        })
    }
}

/// `value` of `field` within `min..=max`, else `LimitOutOfRange` naming both.
pub fn range(field: &'static str, value: f64, min: f64, max: f64) -> Result<(), OpError> {
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
    fn tenant_names_follow_the_same_rules() {
        assert!(tenant_name("acme-2").is_ok());
        assert!(matches!(
            tenant_name("Acme"),
            Err(OpError::InvalidTenantName { .. })
        ));
        assert!(tenant_name("").is_err());
    }

    #[test]
    fn sleep_ladders_are_in_order_within_a_week_and_on_rungs_the_runtime_has() {
        let caps = |snapshot| Capabilities {
            pause: true,
            snapshot,
            host_rootfs: true,
        };
        let ladder = |pause_after_s, snapshot_after_s, stop_after_s| SleepSettings {
            pause_after_s,
            snapshot_after_s,
            stop_after_s,
            auto_resume: true,
        };
        assert!(sleep(ladder(10, 60, 600), "qemu", caps(true)).is_ok());
        assert!(
            sleep(ladder(0, 0, 0), "sandbox", caps(false)).is_ok(),
            "never sleeps"
        );
        assert!(sleep(ladder(10, 0, 604_800), "sandbox", caps(false)).is_ok());
        assert!(sleep(ladder(0, 0, 604_801), "sandbox", caps(false)).is_err());
        let order = sleep(ladder(60, 0, 60), "sandbox", caps(false)).unwrap_err();
        assert!(
            order
                .to_string()
                .contains("`stop_after_s` (60 s) must be longer than `pause_after_s` (60 s)"),
            "{order}"
        );
        let lacks = sleep(ladder(0, 60, 600), "sandbox", caps(false)).unwrap_err();
        assert!(
            matches!(
                lacks,
                OpError::RungUnsupported {
                    field: "snapshot_after_s",
                    ..
                }
            ),
            "{lacks}"
        );
    }

    #[test]
    fn limits_fill_from_the_given_defaults() {
        let defaults = Limits {
            memory_mib: 1024,
            pids: 100,
            cpus: 2.0,
        };
        let l = limits_over(
            defaults,
            LimitsInput {
                pids: Some(50),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!((l.memory_mib, l.pids, l.cpus), (1024, 50, 2.0));
    }

    #[test]
    fn paths_are_absolute_without_nul() {
        assert!(box_path("/home/user/a.txt").is_ok());
        assert!(box_path("a.txt").is_err());
        assert!(box_path("/a\0b").is_err());
        assert!(box_path("").is_err());
    }
}
