//! The OCI `config.json` of one box: berth-init as PID 1 in fresh pid, mount, ipc, uts,
//! net, cgroup and user namespaces, the shared rootfs read-only, the template's layers
//! read-only, the box's volume (with berth-init's state dir) and run dir bound in, cgroup
//! limits, the seccomp filter.

use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    Capability, LinuxBuilder, LinuxCapabilitiesBuilder, LinuxCpuBuilder, LinuxDeviceCgroupBuilder,
    LinuxIdMappingBuilder, LinuxMemoryBuilder, LinuxNamespaceBuilder, LinuxNamespaceType,
    LinuxPidsBuilder, LinuxResourcesBuilder, Mount, MountBuilder, PosixRlimitBuilder,
    PosixRlimitType, ProcessBuilder, RootBuilder, Spec, SpecBuilder, UserBuilder,
};

use berth_protocol::guest::{
    AGENT_STATE_DIR, BOX_CA_BUNDLE, SANDBOX_MEMORY_MAX_ENV, SANDBOX_PIDS_MAX_ENV,
};

use super::cgroup::{with_reserve, MEMORY_RESERVE_MIB, PIDS_RESERVE};
use super::paths::BoxPaths;
use super::rootfs::{host_dirs_to_bind, INIT_PATH};
use super::seccomp;
use crate::{BoxSpec, IdMap, Rootfs, RuntimeError};

/// What berth-init may do: set up its children's ids and files, never the host's kernel.
pub const INIT_CAPABILITIES: &[Capability] = &[
    Capability::Chown,
    Capability::DacOverride,
    Capability::Fowner,
    Capability::Fsetid,
    Capability::Kill,
    Capability::Setgid,
    Capability::Setuid,
    Capability::Setpcap,
    Capability::Setfcap,
    Capability::NetBindService,
    Capability::SysChroot,
    Capability::AuditWrite,
];

/// berth-init's `oom_score_adj`: the OOM killer never picks it (it gives each process it
/// starts 0). Not `process.oomScoreAdj`: runc writes that from inside the user namespace,
/// where lowering it is refused; berth-init inherits it from the runtime instead
/// (`OciCli::run_detached`).
pub const INIT_OOM_SCORE_ADJ: i32 = -1000;
/// Open files per process in the box (lowered to the host's hard limit: inside a user
/// namespace the limit cannot be raised).
const NOFILE: u64 = 65536;
const CPU_PERIOD_US: u64 = 100_000;
const TMP_SIZE: &str = "size=256m";

/// The inputs of one bundle besides the box's spec.
#[derive(Debug, Clone)]
pub struct BundleInput<'a> {
    pub spec: &'a BoxSpec,
    pub rootfs: &'a Path,
    pub init_bin: &'a Path,
    pub paths: &'a BoxPaths,
}

/// The cgroup path of a box, relative to the cgroup mount(s).
pub fn cgroups_path(spec: &BoxSpec) -> PathBuf {
    PathBuf::from(format!("/berth/{}", spec.id.as_str()))
}

pub fn build(input: &BundleInput<'_>) -> Spec {
    let spec = input.spec;
    let caps: oci_spec::runtime::Capabilities = INIT_CAPABILITIES.iter().copied().collect();
    let capabilities = LinuxCapabilitiesBuilder::default()
        .bounding(caps.clone())
        .permitted(caps.clone())
        .effective(caps)
        // Set explicitly: the builder's defaults would put three capabilities here.
        .inheritable(oci_spec::runtime::Capabilities::new())
        .ambient(oci_spec::runtime::Capabilities::new())
        .build()
        .expect("capabilities from fixed parts");
    let nofile = nofile_limit();
    let process = ProcessBuilder::default()
        .terminal(false)
        .user(
            UserBuilder::default()
                .uid(0u32)
                .gid(0u32)
                .build()
                .expect("user 0"),
        )
        .args(vec![INIT_PATH.to_string()])
        .env(init_env(spec))
        .cwd("/")
        .capabilities(capabilities)
        // berth-init must setuid its children; it sets no_new_privs on them itself.
        .no_new_privileges(false)
        .rlimits(vec![PosixRlimitBuilder::default()
            .typ(PosixRlimitType::RlimitNofile)
            .soft(nofile)
            .hard(nofile)
            .build()
            .expect("rlimit from fixed parts")])
        .build()
        .expect("process from fixed parts");

    SpecBuilder::default()
        .version("1.0.2")
        .root(
            RootBuilder::default()
                .path(input.rootfs)
                .readonly(true)
                .build()
                .expect("root"),
        )
        .hostname(spec.hostname.clone())
        .process(process)
        .mounts(mounts(input))
        .linux(linux(spec))
        .build()
        .expect("spec from fixed parts")
}

/// berth-init's environment: the box's own limits, which it gives the box's cgroup inside
/// the container's (`cgroup.rs`).
fn init_env(spec: &BoxSpec) -> Vec<String> {
    let mut env = vec![
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
        "HOME=/root".to_string(),
    ];
    if spec.limits.pids > 0 {
        env.push(format!("{SANDBOX_PIDS_MAX_ENV}={}", spec.limits.pids));
    }
    if spec.limits.memory_mib > 0 {
        let bytes = spec.limits.memory_mib.saturating_mul(1 << 20);
        env.push(format!("{SANDBOX_MEMORY_MAX_ENV}={bytes}"));
    }
    env
}

/// Writes `config.json` into the bundle dir.
pub fn write(input: &BundleInput<'_>) -> Result<(), RuntimeError> {
    let path = input.paths.config_json();
    let json = serde_json::to_vec(&build(input)).expect("an OCI spec serialises");
    std::fs::write(&path, json).map_err(crate::error::io("write", &path))
}

fn linux(spec: &BoxSpec) -> oci_spec::runtime::Linux {
    let namespaces = [
        LinuxNamespaceType::Pid,
        LinuxNamespaceType::Mount,
        LinuxNamespaceType::Ipc,
        LinuxNamespaceType::Uts,
        LinuxNamespaceType::Network,
        LinuxNamespaceType::Cgroup,
        LinuxNamespaceType::User,
    ]
    .into_iter()
    .map(|typ| {
        LinuxNamespaceBuilder::default()
            .typ(typ)
            .build()
            .expect("namespace")
    })
    .collect::<Vec<_>>();
    let mapping = LinuxIdMappingBuilder::default()
        .container_id(0u32)
        .host_id(spec.id_map.host_base)
        .size(IdMap::SIZE)
        .build()
        .expect("id mapping");
    LinuxBuilder::default()
        .namespaces(namespaces)
        .uid_mappings(vec![mapping])
        .gid_mappings(vec![mapping])
        .cgroups_path(cgroups_path(spec))
        .resources(resources(spec))
        .seccomp(seccomp::filter())
        .masked_paths(oci_spec::runtime::get_default_maskedpaths())
        .readonly_paths(readonly_paths())
        .build()
        .expect("linux section from fixed parts")
}

/// runc's defaults, plus the tmpfs runc puts under the cgroup mounts on v1 (which it
/// leaves writable).
fn readonly_paths() -> Vec<String> {
    let mut paths = oci_spec::runtime::get_default_readonly_paths();
    paths.push("/sys/fs/cgroup".into());
    paths
}

/// The container's limits: the box's own (which its cgroup inside holds) plus berth-init's
/// reserve.
fn resources(spec: &BoxSpec) -> oci_spec::runtime::LinuxResources {
    let limits = spec.limits;
    let memory_mib = with_reserve(limits.memory_mib, MEMORY_RESERVE_MIB);
    let memory_bytes = i64::try_from(memory_mib.saturating_mul(1 << 20)).unwrap_or(i64::MAX);
    let pids = with_reserve(limits.pids, PIDS_RESERVE);
    let quota = (limits.cpus.max(0.01) * CPU_PERIOD_US as f64).round() as i64;
    LinuxResourcesBuilder::default()
        .devices(vec![LinuxDeviceCgroupBuilder::default()
            .allow(false)
            .access("rwm")
            .build()
            .expect("device rule")])
        // memory + swap = memory: no swap.
        .memory(
            LinuxMemoryBuilder::default()
                .limit(memory_bytes)
                .swap(memory_bytes)
                .build()
                .expect("memory"),
        )
        .pids(
            LinuxPidsBuilder::default()
                .limit(i64::try_from(pids).unwrap_or(i64::MAX))
                .build()
                .expect("pids"),
        )
        .cpu(
            LinuxCpuBuilder::default()
                .quota(quota)
                .period(CPU_PERIOD_US)
                .build()
                .expect("cpu"),
        )
        .build()
        .expect("resources from fixed parts")
}

fn mounts(input: &BundleInput<'_>) -> Vec<Mount> {
    let paths = input.paths;
    let mut mounts = vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
        mount(
            "/tmp",
            "tmpfs",
            "tmpfs",
            &["nosuid", "nodev", "mode=1777", TMP_SIZE],
        ),
        mount(
            "/run",
            "tmpfs",
            "tmpfs",
            &["nosuid", "nodev", "mode=755", "size=65536k"],
        ),
    ];
    // The host rootfs is a skeleton over the host's /usr; an image holds its own.
    if let Rootfs::Host = input.spec.rootfs {
        mounts.push(bind(
            "/usr",
            Path::new("/usr"),
            &["rbind", "ro", "nosuid", "nodev"],
        ));
        for dir in host_dirs_to_bind() {
            let dest = dir.to_string_lossy().into_owned();
            mounts.push(bind(&dest, &dir, &["rbind", "ro", "nosuid", "nodev"]));
        }
    }
    // Shared layers (checked by `mountpoints::prepare`: never over berth's own mounts, never
    // nested), read-only even for box root, which cannot remount without CAP_SYS_ADMIN.
    for layer in &input.spec.layers {
        mounts.push(bind(
            &layer.target,
            &layer.source,
            &["rbind", "ro", "nosuid", "nodev"],
        ));
    }
    mounts.extend([
        bind(
            "/run/berth",
            &paths.run_dir(),
            &["bind", "nosuid", "nodev", "noexec"],
        ),
        bind(
            "/home/user",
            &paths.home(),
            &["bind", "rw", "nosuid", "nodev"],
        ),
        bind(
            "/memory",
            &paths.memory(),
            &["bind", "rw", "nosuid", "nodev"],
        ),
        bind(
            AGENT_STATE_DIR,
            &paths.agent_state(),
            &["bind", "rw", "nosuid", "nodev", "noexec"],
        ),
        bind(
            INIT_PATH,
            input.init_bin,
            &["bind", "ro", "nosuid", "nodev"],
        ),
        // Per box, over the shared /etc: the pinned names and the trust bundle with the
        // box's CA. Read-only even for box root.
        bind(
            "/etc/hosts",
            &paths.hosts_file(),
            &["bind", "ro", "nosuid", "nodev", "noexec"],
        ),
        bind(
            BOX_CA_BUNDLE,
            &paths.ca_bundle(),
            &["bind", "ro", "nosuid", "nodev", "noexec"],
        ),
    ]);
    mounts
}

fn mount(dest: &str, typ: &str, source: &str, options: &[&str]) -> Mount {
    MountBuilder::default()
        .destination(dest)
        .typ(typ)
        .source(source)
        .options(options.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .build()
        .expect("a mount from fixed parts")
}

fn bind(dest: &str, source: &Path, options: &[&str]) -> Mount {
    MountBuilder::default()
        .destination(dest)
        .typ("bind")
        .source(source)
        .options(options.iter().map(|s| s.to_string()).collect::<Vec<_>>())
        .build()
        .expect("a bind mount from fixed parts")
}

fn nofile_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` to the pointer, which is valid for writes.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        NOFILE.min(limit.rlim_max)
    } else {
        1024
    }
}

#[cfg(test)]
mod tests;
