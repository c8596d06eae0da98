//! Waiting for the disks: after the modules load, virtio_blk probes the drives
//! asynchronously, so `/sys/block/vd*` fill in over a few milliseconds. Polled (bounded)
//! until the config disk is found and every serial it lists has appeared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use berth_protocol::vm::VmConfig;

use super::block::{self, BlockDev};
use super::config_disk::{self, ConfigDiskError};
use super::plan::{self, Plan, PlanError};

/// How often `/sys/block` is looked at while waiting.
const POLL: Duration = Duration::from_millis(5);

#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    #[error("cannot list the disks in {path}")]
    Scan {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    ConfigDisk(#[from] ConfigDiskError),
    #[error("the config disk's disk list is invalid")]
    Plan(#[from] PlanError),
    #[error("no config disk after {waited_ms} ms (disks seen: {seen})")]
    NoConfigDisk { waited_ms: u64, seen: String },
    #[error("disks {missing:?} did not appear within {waited_ms} ms (disks seen: {seen})")]
    Missing {
        missing: Vec<String>,
        waited_ms: u64,
        seen: String,
    },
    #[error("cannot make the device node of {name}")]
    Node {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the disks phase mounts.
#[derive(Debug)]
pub struct Found {
    pub config: VmConfig,
    pub plan: Plan,
    /// Serial → device node.
    pub nodes: BTreeMap<String, PathBuf>,
}

/// Polls `sys_block` until the config disk and every disk it names are there, or
/// `timeout` passes.
pub fn wait(sys_block: &Path, dev_dir: &Path, timeout: Duration) -> Result<Found, DiscoverError> {
    let start = Instant::now();
    let mut config: Option<(String, VmConfig, Plan)> = None;
    loop {
        let disks = block::scan(sys_block).map_err(|source| DiscoverError::Scan {
            path: sys_block.to_owned(),
            source,
        })?;
        if config.is_none() {
            if let Some((name, c)) = config_disk::find(&disks, dev_dir)? {
                let p = plan::plan(&c)?;
                config = Some((name, c, p));
            }
        }
        let waited_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        let expired = start.elapsed() >= timeout;
        let missing = match &config {
            None if expired => {
                return Err(DiscoverError::NoConfigDisk {
                    waited_ms,
                    seen: describe(&disks),
                })
            }
            None => None,
            Some((config_name, c, _)) => match assign(c, config_name, &disks) {
                Ok(assigned) => {
                    let mut nodes = BTreeMap::new();
                    for (serial, disk) in assigned {
                        let node = block::device_node(dev_dir, disk).map_err(|source| {
                            DiscoverError::Node {
                                name: disk.name.clone(),
                                source,
                            }
                        })?;
                        nodes.insert(serial, node);
                    }
                    if let Some((_, config, plan)) = config.take() {
                        return Ok(Found {
                            config,
                            plan,
                            nodes,
                        });
                    }
                    None
                }
                Err(missing) => Some(missing),
            },
        };
        if let (Some(missing), true) = (missing, expired) {
            return Err(DiscoverError::Missing {
                missing,
                waited_ms,
                seen: describe(&disks),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Which disk is which: by virtio serial (QEMU); or, when no disk carries any of the
/// listed serials (Firecracker has none to set), by position: the `disks` list in the
/// order the VMM attached them, which is `vdX` order without the config disk, once
/// exactly that many disks are there. `Err` holds the serials still missing.
fn assign<'a>(
    config: &VmConfig,
    config_disk: &str,
    disks: &'a [BlockDev],
) -> Result<Vec<(String, &'a BlockDev)>, Vec<String>> {
    let by_serial: BTreeMap<&str, &BlockDev> = disks
        .iter()
        .filter_map(|d| Some((d.serial.as_deref()?, d)))
        .collect();
    let wanted: Vec<&str> = config.disks.iter().map(|d| d.serial.as_str()).collect();
    if wanted.iter().any(|s| by_serial.contains_key(s)) {
        let missing: Vec<String> = wanted
            .iter()
            .filter(|s| !by_serial.contains_key(*s))
            .map(|s| (*s).to_owned())
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
        return Ok(wanted
            .iter()
            .map(|s| ((*s).to_owned(), by_serial[s]))
            .collect());
    }
    let others: Vec<&BlockDev> = disks.iter().filter(|d| d.name != config_disk).collect();
    if others.len() != wanted.len() {
        let have = others.len().min(wanted.len());
        return Err(wanted[have..].iter().map(|s| (*s).to_owned()).collect());
    }
    Ok(wanted
        .iter()
        .zip(others)
        .map(|(s, d)| ((*s).to_owned(), d))
        .collect())
}

/// `vda(berth-root,ro) vdb(berth-vol)` for error messages.
fn describe(disks: &[BlockDev]) -> String {
    if disks.is_empty() {
        return "none".to_owned();
    }
    let parts: Vec<String> = disks
        .iter()
        .map(|d| {
            let serial = d.serial.as_deref().unwrap_or("no serial");
            let ro = if d.ro { ",ro" } else { "" };
            format!("{}({serial}{ro})", d.name)
        })
        .collect();
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::block::fake;
    use berth_protocol::vm::{self, VmDisk};

    fn config() -> VmConfig {
        VmConfig {
            token: "t".into(),
            disks: vec![
                VmDisk {
                    serial: "berth-root".into(),
                    target: "/".into(),
                    ro: true,
                },
                VmDisk {
                    serial: "berth-vol".into(),
                    target: "volume".into(),
                    ro: false,
                },
            ],
            ..VmConfig::default()
        }
    }

    #[test]
    fn disks_are_mapped_by_serial_not_by_order() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        fake::disk(sys.path(), dev.path(), "vda", Some("berth-vol"), false, b"");
        fake::disk(
            sys.path(),
            dev.path(),
            "vdb",
            Some("berth-config"),
            true,
            &vm::encode(&config()).unwrap(),
        );
        fake::disk(sys.path(), dev.path(), "vdc", Some("berth-root"), true, b"");
        let found = wait(sys.path(), dev.path(), Duration::from_secs(5)).unwrap();
        assert_eq!(found.config, config());
        assert_eq!(found.nodes["berth-root"], dev.path().join("vdc"));
        assert_eq!(found.nodes["berth-vol"], dev.path().join("vda"));
        assert_eq!(found.plan.root.serial, "berth-root");
    }

    #[test]
    fn a_missing_disk_or_config_disk_times_out_naming_what_is_missing() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        let short = Duration::from_millis(30);
        let err = wait(sys.path(), dev.path(), short).unwrap_err();
        assert!(matches!(err, DiscoverError::NoConfigDisk { .. }), "{err}");
        assert!(err.to_string().contains("disks seen: none"), "{err}");

        fake::disk(
            sys.path(),
            dev.path(),
            "vda",
            None,
            true,
            &vm::encode(&config()).unwrap(),
        );
        fake::disk(sys.path(), dev.path(), "vdb", Some("berth-root"), true, b"");
        let err = wait(sys.path(), dev.path(), short).unwrap_err();
        match &err {
            DiscoverError::Missing { missing, seen, .. } => {
                assert_eq!(missing, &["berth-vol"]);
                assert_eq!(seen, "vda(no serial,ro) vdb(berth-root,ro)");
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn without_serials_disks_are_taken_in_attach_order() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        // Firecracker: the config disk attached last, no serials.
        fake::disk(sys.path(), dev.path(), "vda", None, true, b"");
        let short = Duration::from_millis(30);
        fake::disk(
            sys.path(),
            dev.path(),
            "vdc",
            None,
            true,
            &vm::encode(&config()).unwrap(),
        );
        let err = wait(sys.path(), dev.path(), short).unwrap_err();
        assert!(
            matches!(&err, DiscoverError::Missing { missing, .. } if missing == &["berth-vol"]),
            "{err}"
        );
        fake::disk(sys.path(), dev.path(), "vdb", None, false, b"");
        let found = wait(sys.path(), dev.path(), short).unwrap();
        assert_eq!(found.nodes["berth-root"], dev.path().join("vda"));
        assert_eq!(found.nodes["berth-vol"], dev.path().join("vdb"));
    }

    #[test]
    fn a_bad_disk_list_fails_at_once() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        let bad = VmConfig {
            disks: vec![],
            ..config()
        };
        fake::disk(
            sys.path(),
            dev.path(),
            "vda",
            None,
            true,
            &vm::encode(&bad).unwrap(),
        );
        let start = Instant::now();
        let err = wait(sys.path(), dev.path(), Duration::from_secs(5)).unwrap_err();
        assert!(
            matches!(err, DiscoverError::Plan(PlanError::NoRoot)),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
