//! The floors: what the host itself needs for the same work, with no berth in the way.
//!
//! - start: the OCI runtime's own `run` of the very bundle berth writes for a box, with
//!   `/usr/bin/true` as its process instead of berth-init (same namespaces, user namespace,
//!   mounts, cgroup limits and seccomp);
//! - exec: a local fork + exec of `/usr/bin/true`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use berth_runtime::sandbox::{build_bundle, BundleInput, SandboxConfig, SandboxRuntime};
use berth_runtime::{IdMap, Runtime};

/// A box's own bundle with a trivial process, ready to `run` again and again.
pub struct TrivialBundle {
    program: PathBuf,
    root: PathBuf,
    bundle: PathBuf,
}

impl TrivialBundle {
    /// Starts and stops one box in `dir` (so its volume and run dir exist), then writes its
    /// bundle with `/usr/bin/true` as the process.
    pub async fn new(
        dir: &Path,
        oci_runtime: &str,
    ) -> Result<TrivialBundle, Box<dyn std::error::Error>> {
        let sandbox = SandboxRuntime::new(SandboxConfig {
            data_dir: dir.to_path_buf(),
            oci_runtime: oci_runtime.into(),
            init_bin: berth_runtime::init_binary()?,
        })?;
        let spec = crate::phases::box_spec(0, IdMap::SLOTS - 1)?;
        sandbox.start(&spec).await?;
        sandbox.stop(&spec.id, Duration::from_secs(5)).await?;

        let layout = sandbox.layout();
        let paths = layout.box_paths(&spec.id);
        let init_bin = berth_runtime::init_binary()?;
        let mut config = build_bundle(&BundleInput {
            spec: &spec,
            rootfs: &layout.host_rootfs(),
            init_bin: &init_bin,
            paths: &paths,
        });
        // The volume's mount is gone with the stop: its binds read from plain directories
        // here (as many mounts, the same flags), so the floor pays runc's cost of them but
        // not berth's (e2fsck, loop device, idmapped mount), which is berth's to measure.
        let volume = paths.volume_mount();
        let stand_in = dir.join("floor-volume");
        if let Some(mounts) = config.mounts().clone() {
            let mut swapped = Vec::new();
            for mut mount in mounts {
                if let Some(rest) = mount
                    .source()
                    .as_ref()
                    .and_then(|s| s.strip_prefix(&volume).ok())
                {
                    let source = stand_in.join(rest);
                    std::fs::create_dir_all(&source)?;
                    mount.set_source(Some(source));
                }
                swapped.push(mount);
            }
            config.set_mounts(Some(swapped));
        }
        let mut process = config.process().clone().ok_or("bundle without a process")?;
        process.set_args(Some(vec!["/usr/bin/true".into()]));
        config.set_process(Some(process));
        let bundle = dir.join("floor-bundle");
        std::fs::create_dir_all(&bundle)?;
        config.save(bundle.join("config.json"))?;
        Ok(TrivialBundle {
            program: sandbox.oci_program().to_path_buf(),
            root: layout.oci_root(),
            bundle,
        })
    }

    /// One `run` to completion (create, start, exit, delete).
    pub fn run_once(&self, n: usize) -> std::io::Result<Duration> {
        let started = Instant::now();
        let status = Command::new(&self.program)
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
                self.program.display()
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
