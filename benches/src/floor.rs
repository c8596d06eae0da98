//! The floors: what the host itself needs for the same work, with no berth in the way.
//!
//! - start: the OCI runtime's own `run` of a trivial bundle (`/usr/bin/true`) with the same
//!   namespaces as a box, user namespace included;
//! - exec: a local fork + exec of `/usr/bin/true`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A trivial OCI bundle in `dir`, run by `oci_runtime` with its own `--root`.
pub struct TrivialBundle {
    oci_runtime: String,
    root: PathBuf,
    bundle: PathBuf,
}

impl TrivialBundle {
    pub fn new(dir: &Path, oci_runtime: &str) -> std::io::Result<TrivialBundle> {
        let bundle = dir.join("floor-bundle");
        let rootfs = bundle.join("rootfs");
        for d in ["usr", "proc", "dev", "sys", "tmp"] {
            std::fs::create_dir_all(rootfs.join(d))?;
        }
        for (link, target) in [
            ("bin", "usr/bin"),
            ("lib", "usr/lib"),
            ("lib64", "usr/lib64"),
        ] {
            if Path::new("/").join(link).exists() {
                std::os::unix::fs::symlink(target, rootfs.join(link))?;
            }
        }
        let config = serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"user": {"uid": 0, "gid": 0}, "args": ["/usr/bin/true"], "cwd": "/",
                        "env": ["PATH=/usr/bin"], "noNewPrivileges": true},
            "root": {"path": "rootfs", "readonly": true},
            "hostname": "floor",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid","strictatime","mode=755","size=65536k"]},
                {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind","ro","nosuid","nodev"]}
            ],
            "linux": {
                "uidMappings": [{"containerID": 0, "hostID": 4_000_000_000u32, "size": 65536}],
                "gidMappings": [{"containerID": 0, "hostID": 4_000_000_000u32, "size": 65536}],
                "namespaces": [{"type":"pid"},{"type":"network"},{"type":"ipc"},{"type":"uts"},
                               {"type":"mount"},{"type":"cgroup"},{"type":"user"}]
            }
        });
        std::fs::write(
            bundle.join("config.json"),
            serde_json::to_vec_pretty(&config)?,
        )?;
        let root = dir.join("floor-oci");
        std::fs::create_dir_all(&root)?;
        Ok(TrivialBundle {
            oci_runtime: oci_runtime.to_owned(),
            root,
            bundle,
        })
    }

    /// One `run` to completion (create, start, exit, delete).
    pub fn run_once(&self, n: usize) -> std::io::Result<Duration> {
        let started = Instant::now();
        let status = Command::new(&self.oci_runtime)
            .arg("--root")
            .arg(&self.root)
            .arg("run")
            .arg("--bundle")
            .arg(&self.bundle)
            .arg(format!("floor-{n}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()?;
        let took = started.elapsed();
        if !status.success() {
            return Err(std::io::Error::other(format!(
                "{} run failed: {status}",
                self.oci_runtime
            )));
        }
        Ok(took)
    }
}

/// One local fork + exec + wait of `/usr/bin/true`.
pub fn fork_exec_once() -> std::io::Result<Duration> {
    let started = Instant::now();
    let status = Command::new("/usr/bin/true").status()?;
    let took = started.elapsed();
    if !status.success() {
        return Err(std::io::Error::other("/usr/bin/true failed"));
    }
    Ok(took)
}
