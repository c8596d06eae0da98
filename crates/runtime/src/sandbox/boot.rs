//! One sandbox start after its checks (`SandboxRuntime::start`): the box's rootfs, its
//! volume, its run-dir files, the bundle, the container cgroups, `runc run -d`, then the wait
//! for berth-init's answer. Each step ends with a lap of the start's [`PhaseClock`], and
//! berth-init's own phases follow: what [`Booted::phases`] reports.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use berth_image::VolumeStock;

use super::bundle::{self, cgroups_path, BundleInput};
use super::paths::BoxPaths;
use super::phases::PhaseClock;
use super::{
    cgroup, egress, exit, host, image_rootfs, mountpoints, ready, rootfs, volume, volume_mount,
    SandboxRuntime, VolumeError,
};
use crate::{Booted, BoxSpec, Runtime, RuntimeError};

impl SandboxRuntime {
    pub(super) async fn boot(
        &self,
        spec: &BoxSpec,
        paths: &BoxPaths,
        mut clock: PhaseClock,
    ) -> Result<Booted, RuntimeError> {
        let id = spec.id.as_str();
        // Checks the layers before anything of the box is touched.
        mountpoints::check_layers(spec)?;
        let rootfs = match &spec.rootfs {
            crate::Rootfs::Host => {
                let rootfs = self.layout.host_rootfs();
                rootfs::ensure_host_rootfs(&rootfs)?;
                mountpoints::prepare(&rootfs, spec)?;
                volume::prepare_box_dirs(paths, spec.id_map)?;
                rootfs
            }
            crate::Rootfs::Image(image) => {
                volume::prepare_box_dirs(paths, spec.id_map)?;
                mount_image_rootfs(paths, image, spec).await?
            }
        };
        clock.lap("rootfs");
        mount_volume(paths, spec, &self.volumes, &mut clock).await?;
        volume::write_token(paths, spec.id_map, &spec.boot_token)?;
        volume::write_harness(paths, spec.id_map, spec.harness.as_ref())?;
        volume::write_env(paths, spec.id_map, &spec.env)?;
        volume::write_memory_layout(paths, spec.id_map, spec.memory.as_ref())?;
        volume::write_services(paths, spec.id_map, &spec.services)?;
        egress::write_etc(paths, &spec.egress)?;
        // Bound before the box runs: its harness may connect out during boot.
        let egress = egress::bind(paths, spec.id_map)?;
        clock.lap("box_files");
        bundle::write(&BundleInput {
            spec,
            rootfs: &rootfs,
            init_bin: &self.config.init_bin,
            paths,
        })?;
        clock.lap("bundle");
        let console = host::open_console(&paths.console_log())?;
        // berth-init gets its container's cgroup to put the box's processes in a child.
        let cgroup_dirs = match self.oci_kind() {
            "runc" | "crun" => cgroup::delegate(spec, &cgroups_path(spec))?,
            _ => Vec::new(),
        };
        clock.lap("cgroup");
        if let Err(e) = self
            .oci
            .run_detached(
                id,
                &paths.bundle(),
                &paths.pid_file(),
                console,
                cgroup_dirs,
                bundle::INIT_OOM_SCORE_ADJ,
            )
            .await
        {
            return Err(host::with_console(e, &paths.console_log()));
        }
        clock.lap("runc_run");
        let pid = std::fs::read_to_string(paths.pid_file())
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        // The init becomes berth's child when the detached OCI runtime exits (berth is the
        // child subreaper, see `new`): without this it would stay a zombie. Its status tells
        // `wait_exit` how the boot ended.
        exit::reap_recorded_on_exit(pid, paths);
        let client = self.channel(&spec.id, &spec.boot_token);
        let info = ready::wait_ready(id, &client, pid, &paths.console_log()).await?;
        clock.lap("guest_ready");
        clock.append_init(&info.phases);
        Ok(Booted {
            client,
            egress,
            phases: clock.finish(),
        })
    }
}

/// [`volume_mount::mount`] off the async workers (it runs e2fsck and may migrate); its laps
/// go to `clock`.
async fn mount_volume(
    paths: &BoxPaths,
    spec: &BoxSpec,
    volumes: &Arc<VolumeStock>,
    clock: &mut PhaseClock,
) -> Result<(), RuntimeError> {
    let (owned, id_map, disk_mib) = (paths.clone(), spec.id_map, spec.disk_mib);
    let volumes = volumes.clone();
    let mut laps = std::mem::replace(clock, PhaseClock::start());
    let work = move || {
        let mounted = volume_mount::mount(&owned, id_map, disk_mib, &volumes, &mut laps);
        (mounted, laps)
    };
    match crate::blocking::spawn_blocking(work).await {
        Ok((mounted, laps)) => {
            *clock = laps;
            Ok(mounted?)
        }
        Err(source) => Err(VolumeError::Task {
            image: paths.volume_image(),
            source,
        }
        .into()),
    }
}

/// [`image_rootfs::mount`] off the async workers; the mounted root.
async fn mount_image_rootfs(
    paths: &BoxPaths,
    image: &Path,
    spec: &BoxSpec,
) -> Result<PathBuf, RuntimeError> {
    let (owned, image, spec) = (paths.clone(), image.to_path_buf(), spec.clone());
    let target = paths.rootfs_mount();
    match crate::blocking::spawn_blocking(move || image_rootfs::mount(&owned, &image, &spec)).await
    {
        Ok(result) => Ok(result?),
        Err(source) => Err(VolumeError::Task {
            image: target,
            source,
        }
        .into()),
    }
}
