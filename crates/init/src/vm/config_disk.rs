//! Finding and reading the config disk ([`berth_protocol::vm`]): the one read-only
//! `vdX` whose first bytes are the magic. Never by `vdX` order, and never a writable
//! disk: the box's volume is the one disk the box can write, so box root could plant the
//! magic there, but the host attaches it read-write and it is never considered. Two
//! read-only disks with the magic are refused rather than guessed between.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use berth_protocol::vm::{self, VmConfig, VmConfigError, VM_CONFIG_HEADER_BYTES};

use super::block::{self, BlockDev};

#[derive(Debug, thiserror::Error)]
pub enum ConfigDiskError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{first} and {second} both look like the config disk")]
    Ambiguous { first: String, second: String },
    #[error("the config disk {path} is invalid")]
    Invalid {
        path: PathBuf,
        #[source]
        source: VmConfigError,
    },
}

/// The config disk among `disks` and its decoded config, or `None` when none of them is
/// (it may not have appeared yet).
pub fn find(
    disks: &[BlockDev],
    dev_dir: &Path,
) -> Result<Option<(String, VmConfig)>, ConfigDiskError> {
    let mut found: Option<(String, PathBuf)> = None;
    for disk in disks.iter().filter(|d| d.ro) {
        let path = block::device_node(dev_dir, disk).map_err(|source| ConfigDiskError::Read {
            path: dev_dir.join(&disk.name),
            source,
        })?;
        let mut header = [0u8; VM_CONFIG_HEADER_BYTES];
        let read = File::open(&path).and_then(|mut f| read_up_to(&mut f, &mut header));
        let n = read.map_err(|source| ConfigDiskError::Read {
            path: path.clone(),
            source,
        })?;
        if !vm::has_magic(&header[..n]) {
            continue;
        }
        if let Some((first, _)) = &found {
            return Err(ConfigDiskError::Ambiguous {
                first: first.clone(),
                second: disk.name.clone(),
            });
        }
        found = Some((disk.name.clone(), path));
    }
    let Some((name, path)) = found else {
        return Ok(None);
    };
    read_config(&path).map(|config| Some((name, config)))
}

/// Reads the header, then exactly the payload it announces.
fn read_config(path: &Path) -> Result<VmConfig, ConfigDiskError> {
    let read_err = |source| ConfigDiskError::Read {
        path: path.to_owned(),
        source,
    };
    let invalid = |source| ConfigDiskError::Invalid {
        path: path.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(read_err)?;
    let mut bytes = vec![0u8; VM_CONFIG_HEADER_BYTES];
    let n = read_up_to(&mut file, &mut bytes).map_err(read_err)?;
    let len = vm::payload_len(&bytes[..n]).map_err(invalid)?;
    bytes.resize(VM_CONFIG_HEADER_BYTES + len, 0);
    let n = read_up_to(&mut file, &mut bytes[VM_CONFIG_HEADER_BYTES..]).map_err(read_err)?;
    bytes.truncate(VM_CONFIG_HEADER_BYTES + n);
    vm::decode(&bytes).map_err(invalid)
}

/// Fills `buf` as far as the file goes; returns how much was read.
fn read_up_to(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::block::{fake, scan};

    fn config() -> VmConfig {
        VmConfig {
            token: "t0k".into(),
            ca_bundle: "pem".repeat(3000),
            ..VmConfig::default()
        }
    }

    #[test]
    fn the_config_disk_is_found_by_magic_among_read_only_disks() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        let encoded = vm::encode(&config()).unwrap();
        // A writable disk with the magic (what box root could plant on its volume) is
        // never taken; an ext4-like read-only disk is skipped.
        fake::disk(
            sys.path(),
            dev.path(),
            "vda",
            Some("berth-vol"),
            false,
            &encoded,
        );
        fake::disk(
            sys.path(),
            dev.path(),
            "vdb",
            Some("berth-root"),
            true,
            &[0u8; 8192],
        );
        let disks = scan(sys.path()).unwrap();
        assert!(find(&disks, dev.path()).unwrap().is_none());
        fake::disk(sys.path(), dev.path(), "vdc", None, true, &encoded);
        let disks = scan(sys.path()).unwrap();
        let (name, found) = find(&disks, dev.path()).unwrap().unwrap();
        assert_eq!(name, "vdc");
        assert_eq!(found, config());
    }

    #[test]
    fn two_candidates_or_a_corrupt_disk_fail() {
        let sys = tempfile::tempdir().unwrap();
        let dev = tempfile::tempdir().unwrap();
        let encoded = vm::encode(&config()).unwrap();
        fake::disk(sys.path(), dev.path(), "vda", None, true, &encoded);
        fake::disk(sys.path(), dev.path(), "vdb", None, true, &encoded);
        let err = find(&scan(sys.path()).unwrap(), dev.path()).unwrap_err();
        assert!(matches!(err, ConfigDiskError::Ambiguous { .. }), "{err}");

        let sys = tempfile::tempdir().unwrap();
        // The magic, then a truncated payload.
        fake::disk(sys.path(), dev.path(), "vdc", None, true, &encoded[..100]);
        let err = find(&scan(sys.path()).unwrap(), dev.path()).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigDiskError::Invalid {
                    source: VmConfigError::Truncated { .. },
                    ..
                }
            ),
            "{err}"
        );
        // A disk shorter than the header is not the config disk.
        let sys = tempfile::tempdir().unwrap();
        fake::disk(sys.path(), dev.path(), "vdd", None, true, b"BERT");
        assert!(find(&scan(sys.path()).unwrap(), dev.path())
            .unwrap()
            .is_none());
    }
}
