//! A VM's run directory: what the host bind-mounts into a sandbox, made here from the
//! config disk, so the rest of `berth-init` reads it unchanged: the boot token
//! ([`TOKEN_FILE`], taken and deleted by the serve phase), the box environment
//! ([`BOX_ENV_FILE`], likewise), [`HARNESS_FILE`] when the box has a harness, and
//! [`MEMORY_LAYOUT_FILE`] when its template lays out `/memory` its own way, [`SERVICES_FILE`]
//! when it has services. Also the
//! contents of `/etc/hosts` and the trust bundle, which are bind-mounted over the rootfs's
//! (read-only) files from here. Everything is root-only except those two.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use berth_protocol::guest::{BOX_ENV_FILE, HARNESS_FILE, TOKEN_FILE};
use berth_protocol::memory::MEMORY_LAYOUT_FILE;
use berth_protocol::service::SERVICES_FILE;
use berth_protocol::vm::VmConfig;

/// Sub-directory of the run directory holding the files bound over `/etc`.
pub const ETC_DIR: &str = "etc";
pub const HOSTS_FILE: &str = "hosts";
pub const CA_FILE: &str = "ca-certificates.crt";

#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}")]
pub struct RunDirError {
    path: PathBuf,
    #[source]
    source: io::Error,
}

/// Writes the run directory's files from `config` into `run_dir` (which exists).
pub fn write(run_dir: &Path, config: &VmConfig) -> Result<(), RunDirError> {
    put(&run_dir.join(TOKEN_FILE), config.token.as_bytes(), 0o600)?;
    let env = serde_json::to_vec(&config.env).map_err(|e| RunDirError {
        path: run_dir.join(BOX_ENV_FILE),
        source: e.into(),
    })?;
    put(&run_dir.join(BOX_ENV_FILE), &env, 0o600)?;
    if let Some(harness) = &config.harness {
        let json = serde_json::to_vec(harness).map_err(|e| RunDirError {
            path: run_dir.join(HARNESS_FILE),
            source: e.into(),
        })?;
        put(&run_dir.join(HARNESS_FILE), &json, 0o600)?;
    }
    if let Some(layout) = &config.memory {
        let json = serde_json::to_vec(layout).map_err(|e| RunDirError {
            path: run_dir.join(MEMORY_LAYOUT_FILE),
            source: e.into(),
        })?;
        put(&run_dir.join(MEMORY_LAYOUT_FILE), &json, 0o600)?;
    }
    if !config.services.is_empty() {
        let json = serde_json::to_vec(&config.services).map_err(|e| RunDirError {
            path: run_dir.join(SERVICES_FILE),
            source: e.into(),
        })?;
        put(&run_dir.join(SERVICES_FILE), &json, 0o600)?;
    }
    let etc = run_dir.join(ETC_DIR);
    std::fs::create_dir_all(&etc).map_err(|source| RunDirError {
        path: etc.clone(),
        source,
    })?;
    put(&etc.join(HOSTS_FILE), config.hosts.as_bytes(), 0o644)?;
    put(&etc.join(CA_FILE), config.ca_bundle.as_bytes(), 0o644)?;
    Ok(())
}

fn put(path: &Path, bytes: &[u8], mode: u32) -> Result<(), RunDirError> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|source| RunDirError {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_files_are_the_ones_the_sandbox_path_reads() {
        let dir = tempfile::tempdir().unwrap();
        let harness = serde_json::from_value(serde_json::json!({"command": ["h"]})).unwrap();
        let layout = berth_protocol::memory::MemoryLayout {
            owner: "Alice".into(),
            folders: Vec::new(),
        };
        let config = VmConfig {
            token: "tok".into(),
            env: BTreeMap::from([("K".into(), "berth-ph-1".into())]),
            harness: Some(harness),
            memory: Some(layout.clone()),
            hosts: "127.0.0.1 localhost\n".into(),
            ca_bundle: "PEM".into(),
            ..VmConfig::default()
        };
        write(dir.path(), &config).unwrap();
        let mode = |p: &str| {
            std::fs::metadata(dir.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(mode(TOKEN_FILE), 0o600);
        assert_eq!(mode("etc/hosts"), 0o644);
        // Read back by the very code the sandbox path uses.
        let token = crate::channel::take_token(dir.path()).unwrap();
        assert!(token.matches(b"tok"));
        assert_eq!(crate::box_env::take(dir.path()).unwrap(), config.env);
        let h: berth_protocol::harness::HarnessConfig =
            serde_json::from_slice(&std::fs::read(dir.path().join(HARNESS_FILE)).unwrap()).unwrap();
        assert_eq!(Some(h), config.harness);
        assert_eq!(crate::volume::layout(dir.path()).unwrap(), layout);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("etc/ca-certificates.crt")).unwrap(),
            "PEM"
        );

        // No harness: no harness.json (the harness phase reads that as "none").
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &VmConfig::default()).unwrap();
        assert!(!dir.path().join(HARNESS_FILE).exists());
        assert!(!dir.path().join(MEMORY_LAYOUT_FILE).exists());
        assert!(crate::box_env::take(dir.path()).unwrap().is_empty());
    }
}
