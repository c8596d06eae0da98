//! The templates that ship with berth: `host` (the host's `/usr`, no harness), `echo`
//! (the example stream-json harness of `examples/echo-harness`, as a read-only layer at
//! `/opt/harness`), and, for every runtime, `minimal` (busybox), `debian` (bookworm
//! minbase with `berth_image::DEBIAN_PACKAGES`) and `desktop` (X, XFCE and VNC as services:
//! `desktop.rs`).
//!
//! The echo layer is `<data-dir>/layers/echo/bin/echo-harness`, copied from the binary that
//! ships beside `berth` (or `$ECHO_HARNESS_BIN`). Without that binary the `echo` template is
//! still listed, marked unavailable with the reason.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use berth_protocol::harness::{AckMode, HarnessConfig, DEFAULT_TURN_TIMEOUT_S};
use berth_runtime::Limits;

use super::parse::{DEFAULT_MAX_RESTARTS, DEFAULT_SLEEP};
use super::{Base, LayerSpec, Origin, Template};
use crate::egress::policy::EgressPolicy;

/// Where the echo layer goes in the box.
pub const ECHO_LAYER_TARGET: &str = "/opt/harness";
const ECHO_BINARY_NAME: &str = "echo-harness";
/// The env var naming the echo harness binary (set by `.cargo/config.toml` for tests).
const ECHO_HARNESS_ENV: &str = "ECHO_HARNESS_BIN";

#[derive(Debug, thiserror::Error)]
pub enum EchoLayerError {
    #[error("the echo harness binary is missing (looked for {}); build it with `make init`, or set ECHO_HARNESS_BIN", path.display())]
    Missing { path: PathBuf },

    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The built-in templates. Copies the echo harness into its layer first
/// ([`prepare_echo_layer`]); when that fails, `echo` is listed as unavailable.
pub fn builtins(data_dir: &Path) -> Vec<Template> {
    let data_dir = std::path::absolute(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
    let unavailable = match prepare_echo_layer(&data_dir) {
        Ok(_) => None,
        Err(e) => {
            let reason = berth_runtime::error_chain(&e);
            tracing::warn!(reason = %reason, "the echo template is unavailable");
            Some(reason)
        }
    };
    vec![
        host(),
        echo(&data_dir, unavailable),
        image_base("minimal", Base::Minimal),
        image_base(
            "debian",
            Base::Debian {
                suite: berth_image::DEBIAN_SUITE.into(),
            },
        ),
        Template {
            limits: super::desktop::limits(),
            services: super::desktop::services(),
            ..image_base("desktop", Base::Desktop)
        },
    ]
}

fn host() -> Template {
    image_base("host", Base::Host)
}

/// A template that is its base and nothing else.
fn image_base(name: &str, base: Base) -> Template {
    Template {
        name: name.into(),
        base,
        disk_mib: berth_runtime::DEFAULT_DISK_MIB,
        sleep: DEFAULT_SLEEP,
        limits: Limits::default(),
        layers: Vec::new(),
        harness: None,
        egress: EgressPolicy::default(),
        warm: 0,
        node_labels: Default::default(),
        memory: None,
        services: Vec::new(),
        origin: Origin::Builtin,
        unavailable: None,
        warnings: Vec::new(),
    }
}

fn echo(data_dir: &Path, unavailable: Option<String>) -> Template {
    Template {
        name: "echo".into(),
        base: Base::Host,
        disk_mib: berth_runtime::DEFAULT_DISK_MIB,
        sleep: DEFAULT_SLEEP,
        limits: Limits::default(),
        layers: vec![LayerSpec {
            source: echo_layer_dir(data_dir),
            target: ECHO_LAYER_TARGET.into(),
        }],
        harness: Some(HarnessConfig {
            command: vec![format!("{ECHO_LAYER_TARGET}/bin/{ECHO_BINARY_NAME}")],
            resume_args: vec!["--resume".into(), "{session}".into()],
            session: None,
            env: BTreeMap::new(),
            ack: AckMode::Replay,
            max_restarts: DEFAULT_MAX_RESTARTS,
            turn_timeout_s: DEFAULT_TURN_TIMEOUT_S,
        }),
        egress: EgressPolicy::default(),
        warm: 0,
        node_labels: Default::default(),
        memory: None,
        services: Vec::new(),
        origin: Origin::Builtin,
        unavailable,
        warnings: Vec::new(),
    }
}

/// `<data-dir>/layers/echo`.
pub fn echo_layer_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("layers").join("echo")
}

/// The echo harness binary: `$ECHO_HARNESS_BIN`, else `echo-harness` beside the running
/// executable.
pub fn echo_harness_binary() -> Result<PathBuf, EchoLayerError> {
    let path = match std::env::var_os(ECHO_HARNESS_ENV) {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join(ECHO_BINARY_NAME)))
            .unwrap_or_else(|| ECHO_BINARY_NAME.into()),
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(EchoLayerError::Missing { path })
    }
}

/// Puts the echo harness binary into `<data-dir>/layers/echo/bin/` (mode 0755, every
/// directory 0755 so the box user reaches it) and returns the layer dir. Copies only when
/// the content differs, atomically (a temp file renamed over the old one: a box running the
/// old binary keeps it).
pub fn prepare_echo_layer(data_dir: &Path) -> Result<PathBuf, EchoLayerError> {
    let binary = echo_harness_binary()?;
    prepare_layer_from(data_dir, &binary)
}

fn prepare_layer_from(data_dir: &Path, binary: &Path) -> Result<PathBuf, EchoLayerError> {
    let io = |action, path: &Path| {
        let path = path.to_path_buf();
        move |source| EchoLayerError::Io {
            action,
            path,
            source,
        }
    };
    let layer = echo_layer_dir(data_dir);
    let bin_dir = layer.join("bin");
    std::fs::create_dir_all(&bin_dir).map_err(io("create", &bin_dir))?;
    for dir in [data_dir.join("layers"), layer.clone(), bin_dir.clone()] {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(io("chmod", &dir))?;
    }
    let content = std::fs::read(binary).map_err(io("read", binary))?;
    let dest = bin_dir.join(ECHO_BINARY_NAME);
    let current = std::fs::metadata(&dest)
        .ok()
        .filter(|m| m.permissions().mode() & 0o7777 == 0o755)
        .and_then(|_| std::fs::read(&dest).ok());
    if current.as_deref() == Some(&content[..]) {
        return Ok(layer);
    }
    berth_basics::write_atomically(&dest, &content, 0o755)
        .map_err(io("install the echo harness at", &dest))?;
    Ok(layer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echo_layer_is_copied_once_with_mode_0755_and_replaced_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("echo-harness-build");
        std::fs::write(&binary, b"#!/bin/sh\necho v1\n").unwrap();
        let data = dir.path().join("data");
        let layer = prepare_layer_from(&data, &binary).unwrap();
        assert_eq!(layer, data.join("layers/echo"));
        let dest = layer.join("bin/echo-harness");
        assert_eq!(std::fs::read(&dest).unwrap(), b"#!/bin/sh\necho v1\n");
        let meta = std::fs::metadata(&dest).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o755);
        for d in [data.join("layers"), layer.clone(), layer.join("bin")] {
            assert_eq!(
                std::fs::metadata(&d).unwrap().permissions().mode() & 0o777,
                0o755
            );
        }
        // Same content: the file is left alone (same inode).
        use std::os::unix::fs::MetadataExt;
        let inode = meta.ino();
        prepare_layer_from(&data, &binary).unwrap();
        assert_eq!(std::fs::metadata(&dest).unwrap().ino(), inode);
        // New content: a new file renamed in; no temp file left.
        std::fs::write(&binary, b"#!/bin/sh\necho v2\n").unwrap();
        prepare_layer_from(&data, &binary).unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"#!/bin/sh\necho v2\n");
        assert_ne!(std::fs::metadata(&dest).unwrap().ino(), inode);
        let names: Vec<String> = std::fs::read_dir(layer.join("bin"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["echo-harness"]);
        // A missing build is an error, not a panic.
        assert!(matches!(
            prepare_layer_from(&data, &dir.path().join("none")),
            Err(EchoLayerError::Io { .. })
        ));
    }

    #[test]
    fn builtins_are_host_echo_minimal_debian_desktop_and_echo_says_why_it_is_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let templates = builtins(dir.path());
        let names: Vec<&str> = templates.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["host", "echo", "minimal", "debian", "desktop"]);
        assert_eq!(templates[2].base, Base::Minimal);
        assert_eq!(templates[3].base.to_string(), "debian");
        assert_eq!(templates[4].base, Base::Desktop);
        let echo = &templates[1];
        match echo_harness_binary() {
            Ok(binary) => {
                assert_eq!(echo.unavailable, None);
                let installed = echo.layers[0].source.join("bin/echo-harness");
                assert_eq!(
                    std::fs::read(installed).unwrap(),
                    std::fs::read(binary).unwrap()
                );
            }
            Err(_) => {
                eprintln!("echo-harness is not built: checking the unavailable path only");
                assert!(echo.unavailable.as_deref().unwrap().contains("missing"));
            }
        }
    }

    #[test]
    fn echo_runs_the_layer_binary_and_resumes_its_session() {
        let dir = tempfile::tempdir().unwrap();
        let t = echo(dir.path(), None);
        let h = t.harness.as_ref().unwrap();
        assert_eq!(h.command, ["/opt/harness/bin/echo-harness"]);
        assert_eq!(h.resume_args, ["--resume", "{session}"]);
        assert_eq!(h.ack, AckMode::Replay);
        assert_eq!(t.sleep.stop_after_s, 300);
        assert_eq!(t.layers[0].source, dir.path().join("layers/echo"));
        assert_eq!(t.layers[0].target, "/opt/harness");
        berth_runtime::layer::check_target(&t.layers[0].target).unwrap();
        assert!(host().harness.is_none());
    }
}
