//! Which disk goes where, from the config disk's `disks` list: exactly one rootfs (target
//! `/`), exactly one volume (target [`VOLUME_TARGET`]), and read-only layers at absolute
//! paths of the new root. Checked before anything is mounted, so a bad list fails the boot
//! with one clear line instead of half a root.

use std::collections::BTreeSet;

use berth_protocol::vm::{VmConfig, VOLUME_TARGET};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    #[error("the config lists no rootfs disk (target \"/\")")]
    NoRoot,
    #[error("the config lists no volume disk (target \"volume\")")]
    NoVolume,
    #[error("the config lists target {target:?} twice")]
    DuplicateTarget { target: String },
    #[error("the config lists serial {serial:?} twice")]
    DuplicateSerial { serial: String },
    #[error("disk {serial:?}: the target {target:?} {reason}")]
    BadTarget {
        serial: String,
        target: String,
        reason: &'static str,
    },
    #[error("disk {serial:?}: the serial is empty or longer than 20 bytes (virtio's limit)")]
    BadSerial { serial: String },
}

/// Where the pseudo filesystems and the run directory go: no layer may cover them.
const RESERVED: [&str; 5] = ["/proc", "/sys", "/dev", "/run", "/tmp"];

/// Longest virtio-blk serial (`VIRTIO_BLK_ID_BYTES`).
const MAX_SERIAL_BYTES: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    pub serial: String,
    pub ro: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    pub disk: Disk,
    /// Absolute and normal (no `.`, `..` or empty component).
    pub target: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub root: Disk,
    pub volume: Disk,
    /// Parents before children, so a nested target is mounted on top of its parent.
    pub layers: Vec<Layer>,
}

impl Plan {
    /// Every serial the plan mounts.
    #[cfg(test)]
    pub fn serials(&self) -> impl Iterator<Item = &str> {
        [&self.root, &self.volume]
            .into_iter()
            .chain(self.layers.iter().map(|l| &l.disk))
            .map(|d| d.serial.as_str())
    }
}

pub fn plan(config: &VmConfig) -> Result<Plan, PlanError> {
    let mut serials = BTreeSet::new();
    let mut targets = BTreeSet::new();
    let (mut root, mut volume, mut layers) = (None, None, Vec::new());
    for d in &config.disks {
        if d.serial.is_empty() || d.serial.len() > MAX_SERIAL_BYTES {
            return Err(PlanError::BadSerial {
                serial: d.serial.clone(),
            });
        }
        if !serials.insert(d.serial.as_str()) {
            return Err(PlanError::DuplicateSerial {
                serial: d.serial.clone(),
            });
        }
        if !targets.insert(d.target.as_str()) {
            return Err(PlanError::DuplicateTarget {
                target: d.target.clone(),
            });
        }
        let disk = Disk {
            serial: d.serial.clone(),
            ro: d.ro,
        };
        match d.target.as_str() {
            "/" => root = Some(disk),
            VOLUME_TARGET => volume = Some(disk),
            target => {
                let bad = |reason| PlanError::BadTarget {
                    serial: d.serial.clone(),
                    target: target.to_owned(),
                    reason,
                };
                let rest = target
                    .strip_prefix('/')
                    .ok_or(bad("is not an absolute path"))?;
                if rest
                    .split('/')
                    .any(|c| c.is_empty() || c == "." || c == "..")
                {
                    return Err(bad("is not a normal path (empty, '.' or '..' component)"));
                }
                if RESERVED
                    .iter()
                    .any(|r| target == *r || target.starts_with(&format!("{r}/")))
                {
                    return Err(bad("would cover /proc, /sys, /dev, /run or /tmp"));
                }
                layers.push(Layer {
                    disk,
                    target: target.to_owned(),
                });
            }
        }
    }
    let depth = |l: &Layer| l.target.matches('/').count();
    layers.sort_unstable_by(|a, b| (depth(a), &a.target).cmp(&(depth(b), &b.target)));
    Ok(Plan {
        root: root.ok_or(PlanError::NoRoot)?,
        volume: volume.ok_or(PlanError::NoVolume)?,
        layers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_protocol::vm::VmDisk;

    fn disk(serial: &str, target: &str, ro: bool) -> VmDisk {
        VmDisk {
            serial: serial.into(),
            target: target.into(),
            ro,
        }
    }

    fn config(disks: Vec<VmDisk>) -> VmConfig {
        VmConfig {
            disks,
            ..VmConfig::default()
        }
    }

    #[test]
    fn the_design_example_plans_root_volume_and_layers_parents_first() {
        let p = plan(&config(vec![
            disk("berth-layer-1", "/opt/harness/skills", true),
            disk("berth-root", "/", true),
            disk("berth-vol", "volume", false),
            disk("berth-layer-0", "/opt/harness", true),
        ]))
        .unwrap();
        assert_eq!(p.root.serial, "berth-root");
        assert!(p.root.ro && !p.volume.ro);
        let targets: Vec<_> = p.layers.iter().map(|l| l.target.as_str()).collect();
        assert_eq!(targets, ["/opt/harness", "/opt/harness/skills"]);
        let serials: Vec<_> = p.serials().collect();
        assert_eq!(
            serials,
            ["berth-root", "berth-vol", "berth-layer-0", "berth-layer-1"]
        );
    }

    #[test]
    fn bad_lists_are_refused_naming_the_disk() {
        let root = || disk("r", "/", true);
        let vol = || disk("v", "volume", false);
        let cases = [
            (vec![vol()], PlanError::NoRoot),
            (vec![root()], PlanError::NoVolume),
            (
                vec![root(), vol(), disk("r", "/x", true)],
                PlanError::DuplicateSerial { serial: "r".into() },
            ),
            (
                vec![root(), vol(), disk("v2", "volume", false)],
                PlanError::DuplicateTarget {
                    target: "volume".into(),
                },
            ),
            (
                vec![root(), vol(), disk("", "/x", true)],
                PlanError::BadSerial { serial: "".into() },
            ),
            (
                vec![root(), vol(), disk(&"s".repeat(21), "/x", true)],
                PlanError::BadSerial {
                    serial: "s".repeat(21),
                },
            ),
        ];
        for (disks, wanted) in cases {
            assert_eq!(plan(&config(disks)).unwrap_err(), wanted);
        }
        for target in [
            "opt",
            "/opt/../etc",
            "/opt//x",
            "/opt/",
            "/proc",
            "/dev/x",
            "/run/berth",
            "/./x",
        ] {
            let err = plan(&config(vec![root(), vol(), disk("l", target, true)])).unwrap_err();
            assert!(
                matches!(err, PlanError::BadTarget { .. }),
                "{target}: {err:?}"
            );
        }
        // Near misses of reserved names are fine.
        assert!(plan(&config(vec![root(), vol(), disk("l", "/procfs", true)])).is_ok());
    }
}
