//! A box's own directories on the host: the box dir, the bundle dir and the run dir
//! (`/run/berth`) that carries the boot token and harness config in and the agent socket
//! out. (The persistent volume is an image: `volume_mount.rs`.)
//!
//! Ownership is in the box's mapped id range; directories are chowned only when they are
//! created, so a warm start does no per-file work.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{chown, fchown, OpenOptionsExt};
use std::path::Path;

use berth_protocol::harness::HarnessConfig;
use berth_protocol::service::ServiceConfig;

use super::paths::BoxPaths;
use crate::error::io;
use crate::fs::remove_if_exists;
use crate::fs::{mkdir_all, set_mode};
use crate::{BootToken, IdMap, RuntimeError};

/// Creates the box dir and the run dir if missing, and clears what a previous boot left in
/// the run dir.
pub fn prepare_box_dirs(paths: &BoxPaths, id_map: IdMap) -> Result<(), RuntimeError> {
    let root = id_map.host_id(0);
    mkdir_all(paths.dir())?;
    // Searchable by the box's mapped root group only (it reaches run/ and mnt/ through
    // it): no other host user reaches the box's volume, bundle or logs.
    chown(paths.dir(), None, Some(root)).map_err(io("chown", paths.dir()))?;
    set_mode(paths.dir(), 0o710)?;
    mkdir_all(&paths.bundle())?;

    let run = paths.run_dir();
    if create_dir(&run)? {
        chown(&run, Some(root), Some(root)).map_err(io("chown", &run))?;
        set_mode(&run, 0o700)?;
    }
    remove_if_exists(&paths.agent_socket())?;
    remove_if_exists(&paths.token_file())?;
    remove_if_exists(&paths.harness_file())?;
    remove_if_exists(&paths.env_file())?;
    remove_if_exists(&paths.memory_layout_file())?;
    remove_if_exists(&paths.services_file())?;

    Ok(())
}

/// Writes the boot token where berth-init reads it once (0600, owned by the box's root).
pub fn write_token(paths: &BoxPaths, id_map: IdMap, token: &BootToken) -> Result<(), RuntimeError> {
    let path = paths.token_file();
    let root = id_map.host_id(0);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(io("create the token file", &path))?;
    file.write_all(token.as_str().as_bytes())
        .map_err(io("write the token to", &path))?;
    // On the handle, not the path: the run dir is writable by the box's root.
    fchown(&file, Some(root), Some(root)).map_err(io("chown", &path))
}

/// Writes the box's harness config where berth-init reads it (JSON, 0600, owned by the
/// box's root), or removes a stale one when the box has no harness. Call after
/// [`prepare_box_dirs`], which clears the run dir.
pub fn write_harness(
    paths: &BoxPaths,
    id_map: IdMap,
    harness: Option<&HarnessConfig>,
) -> Result<(), RuntimeError> {
    let json = harness.map(|h| serde_json::to_vec(h).expect("a harness config serialises"));
    write_run_file(&paths.harness_file(), id_map, json.as_deref())
}

/// Writes the box's own environment for this boot where berth-init reads it once (JSON,
/// 0600, owned by the box's root); none when it is empty.
pub fn write_env(
    paths: &BoxPaths,
    id_map: IdMap,
    env: &BTreeMap<String, String>,
) -> Result<(), RuntimeError> {
    let json = (!env.is_empty()).then(|| serde_json::to_vec(env).expect("a string map serialises"));
    write_run_file(&paths.env_file(), id_map, json.as_deref())
}

/// Writes how `/memory` is seeded where berth-init reads it (JSON, 0600, owned by the box's
/// root); none for the default layout.
pub fn write_memory_layout(
    paths: &BoxPaths,
    id_map: IdMap,
    layout: Option<&berth_protocol::memory::MemoryLayout>,
) -> Result<(), RuntimeError> {
    let json = layout.map(|l| serde_json::to_vec(l).expect("a memory layout serialises"));
    write_run_file(&paths.memory_layout_file(), id_map, json.as_deref())
}

/// Writes the template's services where berth-init reads them (a JSON array, 0600, owned
/// by the box's root); none when there are none.
pub fn write_services(
    paths: &BoxPaths,
    id_map: IdMap,
    services: &[ServiceConfig],
) -> Result<(), RuntimeError> {
    let json = (!services.is_empty())
        .then(|| serde_json::to_vec(services).expect("a service config serialises"));
    write_run_file(&paths.services_file(), id_map, json.as_deref())
}

/// Replaces `path` in the run dir with `bytes` (`None`: removes it), 0600, owned by the
/// box's root.
fn write_run_file(path: &Path, id_map: IdMap, bytes: Option<&[u8]>) -> Result<(), RuntimeError> {
    // `remove_file` unlinks a planted link itself, never its target.
    remove_if_exists(path)?;
    let Some(json) = bytes else {
        return Ok(());
    };
    let path = path.to_path_buf();
    let root = id_map.host_id(0);
    // `create_new` (O_EXCL) never follows a link; the run dir is writable by the box's root.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(&path)
        .map_err(io("create", &path))?;
    file.write_all(json).map_err(io("write", &path))?;
    fchown(&file, Some(root), Some(root)).map_err(io("chown", &path))
}

/// Removes the sockets, token, harness config, env, memory layout and services of the last
/// boot (after a stop).
pub fn clear_run_dir(paths: &BoxPaths) -> Result<(), RuntimeError> {
    remove_if_exists(&paths.agent_socket())?;
    remove_if_exists(&paths.egress_socket())?;
    remove_if_exists(&paths.token_file())?;
    remove_if_exists(&paths.harness_file())?;
    remove_if_exists(&paths.env_file())?;
    remove_if_exists(&paths.memory_layout_file())?;
    remove_if_exists(&paths.services_file())
}

/// `true` when this call created the directory.
fn create_dir(path: &Path) -> Result<bool, RuntimeError> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(source) => Err(RuntimeError::Io {
            action: "create the directory",
            path: path.into(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;
    use crate::sandbox::paths::Layout;

    #[test]
    fn run_dir_is_created_once_owned_by_the_mapped_root() {
        if !nix::unistd::geteuid().is_root() {
            berth_testkit::skip("root", "chown needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let id: berth_protocol::BoxId = berth_protocol::BoxId::from_random([1; 20]);
        let paths = Layout::new(dir.path()).box_paths(&id);
        let map = IdMap::for_slot(3).unwrap();
        prepare_box_dirs(&paths, map).unwrap();
        let run = std::fs::metadata(paths.run_dir()).unwrap();
        assert_eq!((run.uid(), run.mode() & 0o777), (map.host_id(0), 0o700));
        let dir = std::fs::metadata(paths.dir()).unwrap();
        assert_eq!((dir.gid(), dir.mode() & 0o777), (map.host_id(0), 0o710));
        write_token(&paths, map, &BootToken::from_random([7; 32])).unwrap();
        let token = std::fs::metadata(paths.token_file()).unwrap();
        assert_eq!((token.uid(), token.mode() & 0o777), (map.host_id(0), 0o600));
        // A second start clears the old token.
        prepare_box_dirs(&paths, map).unwrap();
        assert!(!paths.token_file().exists());
    }

    #[test]
    fn harness_config_is_root_only_json_and_a_planted_link_is_not_followed() {
        if !nix::unistd::geteuid().is_root() {
            berth_testkit::skip("root", "chown needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let id = berth_protocol::BoxId::from_random([5; 20]);
        let paths = Layout::new(dir.path()).box_paths(&id);
        let map = IdMap::for_slot(10).unwrap();
        prepare_box_dirs(&paths, map).unwrap();
        let config: HarnessConfig =
            serde_json::from_value(serde_json::json!({"command": ["/opt/h/agent", "-x"]})).unwrap();
        // Box root planted a link to a host file where the config goes.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "host file").unwrap();
        std::os::unix::fs::symlink(&victim, paths.harness_file()).unwrap();
        write_harness(&paths, map, Some(&config)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host file");
        let meta = std::fs::symlink_metadata(paths.harness_file()).unwrap();
        assert!(meta.is_file());
        assert_eq!((meta.uid(), meta.mode() & 0o777), (map.host_id(0), 0o600));
        let back: HarnessConfig =
            serde_json::from_slice(&std::fs::read(paths.harness_file()).unwrap()).unwrap();
        assert_eq!(back, config);
        // No harness: a stale config is removed.
        write_harness(&paths, map, None).unwrap();
        assert!(!paths.harness_file().exists());
        write_harness(&paths, map, Some(&config)).unwrap();
        prepare_box_dirs(&paths, map).unwrap();
        assert!(!paths.harness_file().exists());
    }

    #[test]
    fn services_are_a_root_only_json_array_written_only_when_there_are_some() {
        if !nix::unistd::geteuid().is_root() {
            berth_testkit::skip("root", "chown needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let id = berth_protocol::BoxId::from_random([6; 20]);
        let paths = Layout::new(dir.path()).box_paths(&id);
        let map = IdMap::for_slot(11).unwrap();
        prepare_box_dirs(&paths, map).unwrap();
        let services: Vec<ServiceConfig> = serde_json::from_value(serde_json::json!([
            {"name": "db", "command": ["/bin/db"]},
            {"name": "web", "command": ["/bin/web"], "after": ["db"]},
        ]))
        .unwrap();
        write_services(&paths, map, &services).unwrap();
        let meta = std::fs::symlink_metadata(paths.services_file()).unwrap();
        assert_eq!((meta.uid(), meta.mode() & 0o777), (map.host_id(0), 0o600));
        let back: Vec<ServiceConfig> =
            serde_json::from_slice(&std::fs::read(paths.services_file()).unwrap()).unwrap();
        assert_eq!(back, services);
        // None: a stale file is removed; a stop clears it too.
        write_services(&paths, map, &[]).unwrap();
        assert!(!paths.services_file().exists());
        write_services(&paths, map, &services).unwrap();
        clear_run_dir(&paths).unwrap();
        assert!(!paths.services_file().exists());
    }
}
