//! The config disk: what the host tells a VM's `berth-init` at boot.
//!
//! A sandbox gets its boot token, harness config and environment as files in a run
//! directory the host bind-mounts. A VM has no shared directory, and the kernel command
//! line is world-readable (`/proc/cmdline`), so the host writes them to a small raw
//! virtio-blk disk instead, attached read-only:
//!
//! | bytes | content |
//! |---|---|
//! | 0..8 | [`VM_CONFIG_MAGIC`], `b"BERTHCF1"` |
//! | 8..16 | `N`, the JSON length, little-endian u64 |
//! | 16..16+N | [`VmConfig`] as JSON |
//! | …end | zeros up to a multiple of [`VM_CONFIG_ALIGN`] (4 KiB) |
//!
//! `berth-init` finds the disk by this magic (never by `vdX` order) among the read-only
//! disks, and the other disks by their virtio serial ([`VmDisk::serial`]).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::harness::HarnessConfig;

/// First bytes of a config disk.
pub const VM_CONFIG_MAGIC: [u8; 8] = *b"BERTHCF1";

/// The console line berth-init prints once its guest channel listens on vsock: the host
/// connects only then, so no connection reaches the guest while its vsock driver comes up
/// (under vhost-device-vsock 0.3.0 a connection at that moment can wedge the guest).
pub const READY_MARK: &str = "berth-init: listening on vsock";

/// The name of the virtio-serial port that carries a `qemu` guest's channel (the guest
/// finds it as `/dev/virtio-ports/<name>`): host and guest streams multiplexed over it by
/// berth-init's mux, which QEMU can migrate where it cannot migrate vhost-user-vsock.
pub const CHANNEL_PORT_NAME: &str = "org.berth.channel";
/// Magic plus the length field.
pub const VM_CONFIG_HEADER_BYTES: usize = 16;
/// The encoded disk is padded with zeros to a multiple of this (a block device's size
/// must be a whole number of sectors; 4 KiB also suits every page-cache read).
pub const VM_CONFIG_ALIGN: usize = 4096;
/// Largest JSON payload accepted. The biggest field is the CA bundle (Debian's is about
/// 220 KB); the cap keeps a corrupt length from making the guest allocate gigabytes.
pub const MAX_VM_CONFIG_BYTES: usize = 4 * 1024 * 1024;

/// Virtio serial of the template rootfs disk (its [`VmDisk::target`] is `/`).
pub const ROOT_DISK_SERIAL: &str = "berth-root";
/// Virtio serial of the box's own read-write volume (its target is [`VOLUME_TARGET`]).
pub const VOLUME_DISK_SERIAL: &str = "berth-vol";
/// Prefix of the virtio serials of the shared read-only layers: `berth-layer-0`, …
pub const LAYER_DISK_SERIAL_PREFIX: &str = "berth-layer-";
/// Virtio serial the host should give the config disk itself. `berth-init` finds the disk
/// by its magic either way (Firecracker has no serials); the serial only helps humans.
pub const CONFIG_DISK_SERIAL: &str = "berth-config";
/// The [`VmDisk::target`] naming the box volume: not a path. `berth-init` mounts it in a
/// root-only place and binds its `home/`, `memory/` and `agent/` to `/home/user`,
/// `/memory` and `/var/lib/berth`.
pub const VOLUME_TARGET: &str = "volume";
/// Top-level directories of the volume image, bound to [`crate::guest::BOX_HOME`],
/// [`crate::guest::BOX_MEMORY`] and [`crate::guest::AGENT_STATE_DIR`].
pub const VOLUME_HOME_DIR: &str = "home";
pub const VOLUME_MEMORY_DIR: &str = "memory";
pub const VOLUME_AGENT_DIR: &str = "agent";

/// Everything a VM's `berth-init` needs from the host for one boot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VmConfig {
    /// The boot token of the guest channel (the sandbox's `<run dir>/token`).
    pub token: String,
    /// The box's hostname (`sethostname`).
    #[serde(default)]
    pub hostname: String,
    /// The sandbox's `<run dir>/harness.json`; `None`: the box has no harness.
    #[serde(default)]
    pub harness: Option<HarnessConfig>,
    /// The sandbox's `<run dir>/env.json`: the box's own environment for this boot.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The whole `/etc/hosts` (the egress allowlist pinned to 127.0.0.1).
    #[serde(default)]
    pub hosts: String,
    /// The whole trust bundle, PEM, for [`crate::guest::BOX_CA_BUNDLE`].
    #[serde(default)]
    pub ca_bundle: String,
    /// The other disks: which virtio serial is mounted where.
    #[serde(default)]
    pub disks: Vec<VmDisk>,
    /// The most processes (and threads) the box's own processes may have at once: the
    /// `pids.max` of the guest cgroup `berth-init` puts every process it starts for the box
    /// in (a sandbox gets the same limit from its container's pids cgroup). `None`: no
    /// limit, as a config from a host older than this field, or a box whose
    /// `limits.pids` is 0, has. `berth-init` itself is outside the cgroup, so it keeps
    /// answering when the box is full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_max: Option<u64>,
    /// How `/memory` is seeded on the volume's first boot (the sandbox's
    /// `<run dir>/memory.json`); `None`: the default layout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<crate::memory::MemoryLayout>,
    /// The template's services (the sandbox's `<run dir>/services.json`), version 7.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<crate::service::ServiceConfig>,
}

/// One disk of the VM besides the config disk.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VmDisk {
    /// The virtio serial the host gave the drive (`/sys/block/vdX/serial` in the guest).
    pub serial: String,
    /// An absolute path in the new root (`/` for the rootfs), or [`VOLUME_TARGET`].
    pub target: String,
    /// Mounted read-only (the rootfs and the layers).
    #[serde(default)]
    pub ro: bool,
}

impl VmDisk {
    /// The disks every VM has: the template rootfs ([`ROOT_DISK_SERIAL`], read-only at `/`)
    /// and the box volume ([`VOLUME_DISK_SERIAL`] at [`VOLUME_TARGET`], read-write).
    pub fn base_disks() -> Vec<VmDisk> {
        vec![
            VmDisk {
                serial: ROOT_DISK_SERIAL.into(),
                target: "/".into(),
                ro: true,
            },
            VmDisk {
                serial: VOLUME_DISK_SERIAL.into(),
                target: VOLUME_TARGET.into(),
                ro: false,
            },
        ]
    }
}

/// Why bytes are not a config disk (or a config cannot be one).
#[derive(Debug)]
pub enum VmConfigError {
    /// Fewer bytes than the 16-byte header.
    Short { len: usize },
    /// The first 8 bytes are not [`VM_CONFIG_MAGIC`].
    BadMagic,
    /// The length field is over [`MAX_VM_CONFIG_BYTES`].
    TooLarge { len: u64 },
    /// The length field says more than the bytes hold.
    Truncated { len: usize, available: usize },
    /// The payload is not a [`VmConfig`].
    Json(serde_json::Error),
    /// [`encode`]: the JSON would be over [`MAX_VM_CONFIG_BYTES`].
    EncodeTooLarge { len: usize },
}

impl fmt::Display for VmConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VmConfigError::Short { len } => write!(
                f,
                "the config disk is {len} bytes, shorter than its {VM_CONFIG_HEADER_BYTES}-byte header"
            ),
            VmConfigError::BadMagic => f.write_str("the config disk does not start with BERTHCF1"),
            VmConfigError::TooLarge { len } => write!(
                f,
                "the config disk says {len} bytes of JSON, over the limit of {MAX_VM_CONFIG_BYTES}"
            ),
            VmConfigError::Truncated { len, available } => write!(
                f,
                "the config disk says {len} bytes of JSON but holds only {available}"
            ),
            VmConfigError::Json(_) => f.write_str("the config disk's JSON is not a VM config"),
            VmConfigError::EncodeTooLarge { len } => write!(
                f,
                "the VM config is {len} bytes of JSON, over the limit of {MAX_VM_CONFIG_BYTES}"
            ),
        }
    }
}

impl std::error::Error for VmConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VmConfigError::Json(err) => Some(err),
            _ => None,
        }
    }
}

/// The disk image for `config`: header, JSON, zeros up to a multiple of 4 KiB.
///
/// Serializing cannot fail for these types (every map has string keys), but a config
/// over [`MAX_VM_CONFIG_BYTES`] would be refused by the guest, so it is refused here.
pub fn encode(config: &VmConfig) -> Result<Vec<u8>, VmConfigError> {
    let json = serde_json::to_vec(config).map_err(VmConfigError::Json)?;
    if json.len() > MAX_VM_CONFIG_BYTES {
        return Err(VmConfigError::EncodeTooLarge { len: json.len() });
    }
    let total = (VM_CONFIG_HEADER_BYTES + json.len()).div_ceil(VM_CONFIG_ALIGN) * VM_CONFIG_ALIGN;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&VM_CONFIG_MAGIC);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.resize(total, 0);
    Ok(out)
}

/// Checks the header and returns the JSON length `N`: the reader then needs
/// `VM_CONFIG_HEADER_BYTES + N` bytes in all. Lets the guest read only what it needs.
pub fn payload_len(header: &[u8]) -> Result<usize, VmConfigError> {
    if header.len() < VM_CONFIG_HEADER_BYTES {
        return Err(VmConfigError::Short { len: header.len() });
    }
    if header[..8] != VM_CONFIG_MAGIC {
        return Err(VmConfigError::BadMagic);
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&header[8..16]);
    let len = u64::from_le_bytes(len);
    match usize::try_from(len) {
        Ok(n) if n <= MAX_VM_CONFIG_BYTES => Ok(n),
        _ => Err(VmConfigError::TooLarge { len }),
    }
}

/// Whether `bytes` start with the config disk magic (cheap check while scanning disks).
pub fn has_magic(bytes: &[u8]) -> bool {
    bytes.starts_with(&VM_CONFIG_MAGIC)
}

/// Decodes a config disk (the padding after the JSON is ignored).
pub fn decode(bytes: &[u8]) -> Result<VmConfig, VmConfigError> {
    let len = payload_len(bytes)?;
    let available = bytes.len() - VM_CONFIG_HEADER_BYTES;
    if len > available {
        return Err(VmConfigError::Truncated { len, available });
    }
    let json = &bytes[VM_CONFIG_HEADER_BYTES..VM_CONFIG_HEADER_BYTES + len];
    serde_json::from_slice(json).map_err(VmConfigError::Json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> VmConfig {
        VmConfig {
            token: "tok".into(),
            hostname: "vm1".into(),
            harness: Some(
                serde_json::from_value(json!({"command": ["echo-harness"], "ack": "replay"}))
                    .unwrap(),
            ),
            env: BTreeMap::from([("ANTHROPIC_API_KEY".into(), "berth-ph-1".into())]),
            memory: None,
            services: Vec::new(),
            hosts: "127.0.0.1 localhost api.anthropic.com\n".into(),
            ca_bundle: "-----BEGIN CERTIFICATE-----\n".into(),
            disks: VmDisk::base_disks(),
            pids_max: Some(64),
        }
    }

    #[test]
    fn a_config_round_trips_padded_to_4_kib() {
        let config = sample();
        let bytes = encode(&config).unwrap();
        assert_eq!(bytes.len(), VM_CONFIG_ALIGN);
        assert!(has_magic(&bytes));
        assert_eq!(decode(&bytes).unwrap(), config);
        // A payload over one block takes whole blocks.
        let big = VmConfig {
            ca_bundle: "x".repeat(5000),
            ..sample()
        };
        let bytes = encode(&big).unwrap();
        assert_eq!(bytes.len(), 2 * VM_CONFIG_ALIGN);
        assert_eq!(decode(&bytes).unwrap(), big);
        // Only the header and payload are needed.
        let n = payload_len(&bytes).unwrap();
        assert_eq!(decode(&bytes[..VM_CONFIG_HEADER_BYTES + n]).unwrap(), big);
    }

    #[test]
    fn the_wire_shape_is_the_documented_one() {
        let bytes = encode(&sample()).unwrap();
        assert_eq!(&bytes[..8], b"BERTHCF1");
        let n = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        let value: serde_json::Value = serde_json::from_slice(&bytes[16..16 + n]).unwrap();
        assert_eq!(
            value["disks"][0],
            json!({"serial":"berth-root","target":"/","ro":true})
        );
        assert_eq!(value["token"], "tok");
        assert!(bytes[16 + n..].iter().all(|&b| b == 0));
        // Lenient inside: missing optional fields default, unknown ones are ignored.
        let minimal = br#"{"token":"t","disks":[{"serial":"s","target":"volume"}],"new":1}"#;
        let mut disk = VM_CONFIG_MAGIC.to_vec();
        disk.extend_from_slice(&(minimal.len() as u64).to_le_bytes());
        disk.extend_from_slice(minimal);
        let config = decode(&disk).unwrap();
        assert_eq!(config.harness, None);
        assert!(!config.disks[0].ro);
        assert_eq!(
            config.pids_max, None,
            "a config without a pids limit has none"
        );
    }

    #[test]
    fn the_pids_limit_travels_and_none_is_left_out() {
        let bytes = encode(&sample()).unwrap();
        let n = payload_len(&bytes).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&bytes[16..16 + n]).unwrap();
        assert_eq!(value["pids_max"], 64);
        assert_eq!(decode(&bytes).unwrap().pids_max, Some(64));
        // No limit: no field, so a guest older than the field reads the same config.
        let unlimited = VmConfig {
            pids_max: None,
            ..sample()
        };
        let bytes = encode(&unlimited).unwrap();
        let n = payload_len(&bytes).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&bytes[16..16 + n]).unwrap();
        assert!(value.get("pids_max").is_none(), "{value}");
        assert_eq!(decode(&bytes).unwrap(), unlimited);
    }

    #[test]
    fn corrupt_short_and_oversized_input_is_refused() {
        let good = encode(&sample()).unwrap();
        assert!(matches!(decode(&[]), Err(VmConfigError::Short { len: 0 })));
        assert!(matches!(
            decode(&good[..15]),
            Err(VmConfigError::Short { len: 15 })
        ));
        let mut bad = good.clone();
        bad[0] = b'b';
        assert!(matches!(decode(&bad), Err(VmConfigError::BadMagic)));
        assert!(matches!(decode(&[0u8; 4096]), Err(VmConfigError::BadMagic)));
        let mut huge = good.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            decode(&huge),
            Err(VmConfigError::TooLarge { len: u64::MAX })
        ));
        let mut over = good.clone();
        over[8..16].copy_from_slice(&(MAX_VM_CONFIG_BYTES as u64 + 1).to_le_bytes());
        assert!(matches!(decode(&over), Err(VmConfigError::TooLarge { .. })));
        let n = payload_len(&good).unwrap();
        assert!(matches!(
            decode(&good[..VM_CONFIG_HEADER_BYTES + n - 1]),
            Err(VmConfigError::Truncated { .. })
        ));
        let mut garbage = good.clone();
        garbage[VM_CONFIG_HEADER_BYTES] = b'[';
        assert!(matches!(decode(&garbage), Err(VmConfigError::Json(_))));
        let too_big = VmConfig {
            ca_bundle: "x".repeat(MAX_VM_CONFIG_BYTES),
            ..sample()
        };
        assert!(matches!(
            encode(&too_big),
            Err(VmConfigError::EncodeTooLarge { .. })
        ));
    }
}
