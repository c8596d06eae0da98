//! The config disk of one boot (`berth_protocol::vm`): the boot token, hostname, harness,
//! environment, `/etc/hosts`, trust bundle and which disk goes where, written as a raw disk
//! attached read-only, which berth-init finds by its magic.
//!
//! The token travels here and not on the kernel command line (`/proc/cmdline` is
//! world-readable in the guest). The file is 0600 in the host-only VM dir, and deleted when
//! the box stops; while the box runs the host reads the token back from it to ask the
//! guest to shut down.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use berth_protocol::vm::{self, VmConfig, VmDisk, MAX_VM_CONFIG_BYTES, VM_CONFIG_HEADER_BYTES};

use crate::error::io;
use crate::{BoxSpec, RuntimeError};

/// The config of `spec`'s boot, with `disks` (serial → target) besides the config disk.
pub fn build(spec: &BoxSpec, disks: Vec<VmDisk>) -> Result<VmConfig, RuntimeError> {
    Ok(VmConfig {
        token: spec.boot_token.as_str().to_owned(),
        hostname: spec.hostname.clone(),
        harness: spec.harness.clone(),
        env: spec.env.clone(),
        hosts: crate::guest_etc::hosts(&spec.egress.pinned_hosts)?,
        ca_bundle: crate::guest_etc::ca_bundle_text(&spec.egress)?,
        disks,
        pids_max: pids_max(spec.limits.pids),
        memory: spec.memory.clone(),
        services: spec.services.clone(),
    })
}

/// The guest's `pids.max` for a box's `limits.pids`. 0 is no limit, as the sandbox's OCI
/// runtime reads a pids limit of 0 (runc leaves `pids.max` at `max`).
fn pids_max(pids: u64) -> Option<u64> {
    (pids > 0).then_some(pids)
}

/// Writes the disk at `path` (0600), replacing a previous boot's atomically.
pub fn write(path: &Path, config: &VmConfig) -> Result<(), RuntimeError> {
    let bytes = vm::encode(config)
        .map_err(|e| io("encode the config disk", path)(std::io::Error::other(e)))?;
    let tmp = path.with_extension("tmp");
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io("remove", &tmp)(e)),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io("create the config disk", &tmp))?;
    file.write_all(&bytes)
        .map_err(io("write the config disk", &tmp))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(io("move the config disk into place", path))
}

/// Reads back the config of the boot whose disk is at `path`.
pub fn read(path: &Path) -> Result<VmConfig, RuntimeError> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(io("open the config disk", path))?;
    let mut bytes = Vec::new();
    file.take((VM_CONFIG_HEADER_BYTES + MAX_VM_CONFIG_BYTES) as u64)
        .read_to_end(&mut bytes)
        .map_err(io("read the config disk", path))?;
    vm::decode(&bytes).map_err(|e| io("decode the config disk", path)(std::io::Error::other(e)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BootToken, EgressSetup, IdMap, Limits, Rootfs};
    use berth_protocol::BoxId;

    fn spec() -> BoxSpec {
        BoxSpec {
            id: BoxId::from_random([1; 20]),
            hostname: "vm1".into(),
            rootfs: Rootfs::Host,
            limits: Limits::default(),
            boot_token: BootToken::from_random([0xcd; 32]),
            id_map: IdMap::for_slot(0).unwrap(),
            layers: vec![],
            harness: Some(
                serde_json::from_value(serde_json::json!({"command": ["/bin/cat"]})).unwrap(),
            ),
            egress: EgressSetup {
                pinned_hosts: vec!["api.example.test".into()],
                ca_pem: Some("BOX CA PEM\n".into()),
            },
            env: [("ANTHROPIC_API_KEY".to_owned(), "berth-ph-1".to_owned())].into(),
            memory: None,
            services: vec![serde_json::from_value(
                serde_json::json!({"name": "db", "command": ["/bin/db"], "ready": {"port": 5432}}),
            )
            .unwrap()],
            disk_mib: crate::DEFAULT_DISK_MIB,
        }
    }

    #[test]
    fn the_disk_carries_the_boot_and_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let disks = VmDisk::base_disks();
        let config = build(&spec(), disks.clone()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.img");
        std::fs::write(&path, "an old boot's disk").unwrap();
        write(&path, &config).unwrap();

        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..8], b"BERTHCF1");
        assert_eq!(bytes.len() % 4096, 0);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert!(!path.with_extension("tmp").exists());

        let back = read(&path).unwrap();
        assert_eq!(back.token, "cd".repeat(32));
        assert_eq!(back.hostname, "vm1");
        assert_eq!(back.env["ANTHROPIC_API_KEY"], "berth-ph-1");
        assert!(back.hosts.contains("127.0.0.1\tapi.example.test\n"));
        assert!(back.ca_bundle.ends_with("BOX CA PEM\n"));
        assert_eq!(back.harness, spec().harness);
        assert_eq!(back.services, spec().services);
        assert_eq!(back.disks, disks);
        assert_eq!(back.pids_max, Some(Limits::default().pids));
    }

    #[test]
    fn the_pids_limit_is_the_boxes_and_0_is_none() {
        let mut spec = spec();
        spec.limits.pids = 64;
        assert_eq!(build(&spec, vec![]).unwrap().pids_max, Some(64));
        spec.limits.pids = 0;
        assert_eq!(build(&spec, vec![]).unwrap().pids_max, None);
        spec.limits.pids = u64::MAX;
        assert_eq!(build(&spec, vec![]).unwrap().pids_max, Some(u64::MAX));
    }

    #[test]
    fn a_bad_pinned_host_or_a_corrupt_disk_is_an_error() {
        let mut bad = spec();
        bad.egress.pinned_hosts = vec!["a\n10.0.0.1 evil".into()];
        assert!(matches!(
            build(&bad, vec![]),
            Err(RuntimeError::InvalidEgressHost { .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.img");
        std::fs::write(&path, [0u8; 4096]).unwrap();
        assert!(matches!(read(&path), Err(RuntimeError::Io { .. })));
    }
}
