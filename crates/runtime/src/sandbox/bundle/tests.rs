use serde_json::{json, Value};

use super::*;
use crate::sandbox::paths::Layout;
use crate::{BootToken, Limits};

fn config() -> (Value, BoxSpec, BoxPaths) {
    config_with(Vec::new())
}

fn config_with(layers: Vec<crate::Layer>) -> (Value, BoxSpec, BoxPaths) {
    let spec = BoxSpec {
        id: berth_protocol::BoxId::from_random([2; 20]),
        hostname: "my-box".into(),
        rootfs: Rootfs::Host,
        limits: Limits {
            memory_mib: 64,
            pids: 100,
            cpus: 1.5,
        },
        boot_token: BootToken::from_random([0; 32]),
        id_map: IdMap::for_slot(5).unwrap(),
        layers,
        harness: None,
        egress: Default::default(),
        env: Default::default(),
        memory: None,
        services: Vec::new(),
        disk_mib: crate::DEFAULT_DISK_MIB,
    };
    let layout = Layout::new(Path::new("/var/lib/berth"));
    let paths = layout.box_paths(&spec.id);
    let rootfs = layout.host_rootfs();
    let input = BundleInput {
        spec: &spec,
        rootfs: &rootfs,
        init_bin: Path::new("/opt/berth-init"),
        paths: &paths,
    };
    (serde_json::to_value(build(&input)).unwrap(), spec, paths)
}

fn mount<'a>(config: &'a Value, dest: &str) -> &'a Value {
    config["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == dest)
        .unwrap_or_else(|| panic!("no mount at {dest}"))
}

fn options(mount: &Value) -> Vec<&str> {
    mount["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap())
        .collect()
}

#[test]
fn runs_berth_init_in_every_namespace_with_the_box_id_range() {
    let (c, spec, _) = config();
    let mut namespaces: Vec<&str> = c["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["type"].as_str().unwrap())
        .collect();
    namespaces.sort();
    assert_eq!(
        namespaces,
        ["cgroup", "ipc", "mount", "network", "pid", "user", "uts"]
    );
    assert!(c["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .all(|n| n.get("path").is_none()));
    let mapping = json!([{"containerID": 0, "hostID": spec.id_map.host_base, "size": 65536}]);
    assert_eq!(c["linux"]["uidMappings"], mapping);
    assert_eq!(c["linux"]["gidMappings"], mapping);
    assert_ne!(spec.id_map.host_base, 0);
    assert_eq!(c["hostname"], "my-box");
    assert_eq!(c["process"]["args"], json!(["/.berth/berth-init"]));
    assert_eq!(c["process"]["user"]["uid"], 0);
    assert_eq!(c["process"]["noNewPrivileges"], false);
    let caps: Vec<&str> = c["process"]["capabilities"]["bounding"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(caps.contains(&"CAP_SETUID") && caps.contains(&"CAP_CHOWN"));
    for forbidden in [
        "CAP_SYS_ADMIN",
        "CAP_SYS_MODULE",
        "CAP_NET_ADMIN",
        "CAP_SYS_PTRACE",
        "CAP_MKNOD",
        "CAP_NET_RAW",
    ] {
        assert!(!caps.contains(&forbidden), "{forbidden}");
    }
    assert_eq!(c["process"]["capabilities"]["ambient"], json!([]));
    assert_eq!(c["process"]["capabilities"]["inheritable"], json!([]));
    assert!(c["process"]["rlimits"][0]["hard"].as_u64().unwrap() >= 1024);
}

#[test]
fn root_is_read_only_and_mounts_bind_the_box_dirs() {
    let (c, _, paths) = config();
    assert_eq!(c["root"]["readonly"], true);
    assert_eq!(c["root"]["path"], "/var/lib/berth/templates/host/rootfs");
    let usr = mount(&c, "/usr");
    assert_eq!(usr["source"], "/usr");
    assert!(options(usr).contains(&"ro") && options(usr).contains(&"nosuid"));
    let run = mount(&c, "/run/berth");
    assert_eq!(run["source"], paths.run_dir().to_str().unwrap());
    assert!(options(run).contains(&"noexec"));
    assert_eq!(
        mount(&c, "/home/user")["source"],
        paths.home().to_str().unwrap()
    );
    assert_eq!(
        mount(&c, "/memory")["source"],
        paths.memory().to_str().unwrap()
    );
    let init = mount(&c, "/.berth/berth-init");
    assert_eq!(init["source"], "/opt/berth-init");
    assert!(options(init).contains(&"ro"));
    assert!(options(mount(&c, "/sys")).contains(&"ro"));
    assert!(options(mount(&c, "/tmp"))
        .iter()
        .any(|o| o.starts_with("size=")));
    assert_eq!(mount(&c, "/proc")["type"], "proc");
    assert!(options(mount(&c, "/dev/pts")).contains(&"newinstance"));
    let masked = c["linux"]["maskedPaths"].as_array().unwrap();
    assert!(masked.contains(&json!("/proc/kcore")) && masked.contains(&json!("/proc/keys")));
    let readonly = c["linux"]["readonlyPaths"].as_array().unwrap();
    assert!(readonly.contains(&json!("/proc/sys")) && readonly.contains(&json!("/sys/fs/cgroup")));
}

/// On an image the root is the box's mount of it, and nothing of the host's /usr is bound.
#[test]
fn an_image_root_gets_no_host_binds() {
    let (_, mut spec, paths) = config();
    spec.rootfs = Rootfs::Image("/var/lib/berth/images/rootfs/x.ext4".into());
    let root = paths.rootfs_mount();
    let input = BundleInput {
        spec: &spec,
        rootfs: &root,
        init_bin: Path::new("/opt/berth-init"),
        paths: &paths,
    };
    let c = serde_json::to_value(build(&input)).unwrap();
    assert_eq!(c["root"]["path"], root.to_str().unwrap());
    assert_eq!(c["root"]["readonly"], true);
    let host_sources: Vec<&Value> = c["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["source"].as_str().is_some_and(|s| {
                s == "/usr" || host_dirs_to_bind().iter().any(|d| d == Path::new(s))
            })
        })
        .collect();
    assert!(host_sources.is_empty(), "{host_sources:?}");
    assert_eq!(mount(&c, "/.berth/berth-init")["source"], "/opt/berth-init");
    assert_eq!(
        mount(&c, "/home/user")["source"],
        paths.home().to_str().unwrap()
    );
}

#[test]
fn layers_are_read_only_binds_and_the_agent_state_dir_is_bound_noexec() {
    let layers = vec![
        crate::Layer {
            source: "/srv/berth/harness".into(),
            target: "/opt/harness".into(),
        },
        crate::Layer {
            source: "/srv/skills/pdf".into(),
            target: "/mnt/skills/pdf".into(),
        },
    ];
    let (c, _, paths) = config_with(layers);
    for (dest, source) in [
        ("/opt/harness", "/srv/berth/harness"),
        ("/mnt/skills/pdf", "/srv/skills/pdf"),
    ] {
        let layer = mount(&c, dest);
        assert_eq!(
            (layer["type"].as_str(), layer["source"].as_str()),
            (Some("bind"), Some(source))
        );
        let mut opts = options(layer);
        opts.sort();
        assert_eq!(opts, ["nodev", "nosuid", "rbind", "ro"]);
    }
    let agent = mount(&c, "/var/lib/berth");
    assert_eq!(agent["source"], paths.agent_state().to_str().unwrap());
    let mut opts = options(agent);
    opts.sort();
    assert_eq!(opts, ["bind", "nodev", "noexec", "nosuid", "rw"]);
    // Layers come after the mounts they sit on (/, /tmp, /run) and no later mount
    // lands under one of them.
    let dests: Vec<&str> = c["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["destination"].as_str().unwrap())
        .collect();
    let at = |d: &str| dests.iter().position(|x| *x == d).unwrap();
    assert!(at("/opt/harness") > at("/run") && at("/opt/harness") > at("/tmp"));
    assert!(dests[at("/mnt/skills/pdf") + 1..]
        .iter()
        .all(|d| !d.starts_with("/opt/harness") && !d.starts_with("/mnt/skills/pdf")));
}

#[test]
fn limits_become_cgroup_resources_without_swap() {
    let (c, spec, _) = config();
    let r = &c["linux"]["resources"];
    // The box's own limits plus berth-init's reserve; the box's cgroup inside gets the
    // box's own from berth-init's environment.
    assert_eq!(r["memory"]["limit"], (64 + MEMORY_RESERVE_MIB) << 20);
    assert_eq!(r["memory"]["swap"], (64 + MEMORY_RESERVE_MIB) << 20);
    assert_eq!(r["pids"]["limit"], 100 + PIDS_RESERVE);
    let env = c["process"]["env"].as_array().unwrap();
    assert!(env.contains(&json!("BERTH_BOX_PIDS_MAX=100")), "{env:?}");
    assert!(env.contains(&json!(format!("BERTH_BOX_MEMORY_MAX={}", 64 << 20))));
    assert!(c["process"].get("oomScoreAdj").is_none());
    assert_eq!(
        (r["cpu"]["quota"].as_i64(), r["cpu"]["period"].as_u64()),
        (Some(150_000), Some(100_000))
    );
    assert_eq!(r["devices"], json!([{"allow": false, "access": "rwm"}]));
    assert_eq!(
        c["linux"]["cgroupsPath"],
        format!("/berth/{}", spec.id.as_str())
    );
    assert_eq!(c["linux"]["seccomp"]["defaultAction"], "SCMP_ACT_ALLOW");
    assert!(c["linux"]["seccomp"]["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["names"]
            .as_array()
            .unwrap()
            .contains(&json!("kexec_load"))
            && s["errnoRet"] == 1));
}
