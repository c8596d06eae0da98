//! The conformance suite's fixtures: one backend per test with its own data dir, fresh
//! box specs, exec helpers and host-side probes.

use std::future::Future;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use berth_protocol::guest::{BoxUser, ExecFrame, ExecRequest};
use berth_protocol::BoxId;
use berth_runtime::sandbox::{SandboxConfig, SandboxRuntime};
use berth_runtime::{
    BootToken, BoxSpec, GuestClient, IdMap, Limits, Rootfs, Runtime, RuntimeError,
};

/// One backend for one test. Dropping it (also on panic) kills and deletes every box it
/// started and removes its data dir.
pub struct Fixture {
    pub runtime: Arc<dyn Runtime>,
    pub sandbox: Arc<SandboxRuntime>,
    _dir: tempfile::TempDir,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let left = self.sandbox.cleanup_all_blocking();
        if !left.is_empty() {
            eprintln!("cleanup could not remove: {left:?}");
        }
    }
}

/// The sandbox backend (runc unless `BERTH_OCI_RUNTIME` says otherwise) on a fresh data
/// dir, or `None` after printing why the test is skipped.
pub fn fixture(name: &str) -> Option<Fixture> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: {name}: the sandbox backend needs root");
        return None;
    }
    let init_bin = match berth_runtime::init_binary() {
        Ok(path) => path,
        Err(e) => {
            eprintln!("SKIPPED: {name}: {e}");
            return None;
        }
    };
    let dir = tempfile::Builder::new()
        .prefix(&format!("berth-conformance-{name}-"))
        .tempdir()
        .unwrap();
    let config = SandboxConfig {
        data_dir: dir.path().to_path_buf(),
        oci_runtime: std::env::var("BERTH_OCI_RUNTIME").unwrap_or_else(|_| "runc".into()),
        init_bin,
    };
    match SandboxRuntime::new(config) {
        Ok(sandbox) => {
            let sandbox = Arc::new(sandbox);
            Some(Fixture {
                runtime: sandbox.clone(),
                sandbox,
                _dir: dir,
            })
        }
        Err(e @ RuntimeError::Missing { .. }) => {
            eprintln!("SKIPPED: {name}: {e}");
            None
        }
        Err(e) => panic!("SandboxRuntime::new: {e}"),
    }
}

pub fn random<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf
}

pub fn token() -> BootToken {
    BootToken::from_random(random())
}

/// A box with a random id and a random id range (tests run in parallel).
pub fn new_spec(limits: Limits) -> BoxSpec {
    let id = BoxId::from_random(random());
    let slot = u32::from_le_bytes(random()) % IdMap::SLOTS;
    BoxSpec {
        hostname: format!("t-{}", &id.as_str()[3..11]),
        id,
        rootfs: Rootfs::Host,
        limits,
        boot_token: token(),
        id_map: IdMap::for_slot(slot).unwrap(),
        layers: Vec::new(),
        harness: None,
        egress: Default::default(),
        env: Default::default(),
        disk_mib: berth_runtime::DEFAULT_DISK_MIB,
    }
}

/// Runs `argv` to the end: (shell status, stdout, stderr). Errors of the channel give -1.
pub async fn run(
    client: &GuestClient,
    argv: &[&str],
    user: BoxUser,
    timeout: Option<Duration>,
) -> (i32, String, String) {
    let req = ExecRequest {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        user,
        timeout_ms: timeout.map(|t| t.as_millis() as u64),
        ..Default::default()
    };
    let mut stream = match client.exec(&req).await {
        Ok(stream) => stream,
        Err(e) => return (-1, String::new(), format!("exec: {e}")),
    };
    let (mut out, mut err, mut code) = (Vec::new(), Vec::new(), -1);
    loop {
        match stream.next_frame().await {
            Ok(Some(ExecFrame::Stdout { data })) => out.extend(data),
            Ok(Some(ExecFrame::Stderr { data })) => err.extend(data),
            Ok(Some(ExecFrame::Exit {
                code: c, signal, ..
            })) => code = ExecFrame::shell_status(c, signal),
            Ok(Some(ExecFrame::Error { message, .. })) => {
                code = 127;
                err.extend(message.into_bytes());
            }
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                err.extend(format!("stream: {e}").into_bytes());
                break;
            }
        }
    }
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

/// Runs `argv`, asserting it exits 0; its stdout.
pub async fn run_ok(client: &GuestClient, argv: &[&str], user: BoxUser) -> String {
    let (code, out, err) = run(client, argv, user, Some(Duration::from_secs(30))).await;
    assert_eq!(code, 0, "{argv:?} as {user:?} failed: {err}");
    out
}

/// Polls `check` with a short backoff until it holds; panics after 15 s.
pub async fn wait_until<F, Fut>(mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    let mut backoff = Duration::from_millis(5);
    while !check().await {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "condition not reached in 15 s"
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(200));
    }
}

/// The real uid of host process `pid`.
pub fn host_uid_of(pid: i32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Live host pids whose uid lies in the box's range. Zombies are left out: a dead box
/// init is reaped by the host's PID 1 (not by berth), on its own schedule.
pub fn host_pids_in_range(map: IdMap) -> Vec<i32> {
    let range = map.host_base..map.host_base + IdMap::SIZE;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| host_uid_of(pid).is_some_and(|uid| range.contains(&uid)) && !is_zombie(pid))
        .collect()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
        // Gone between the listing and the read: not alive either.
        .unwrap_or(true)
}

/// Where the box's cgroup would be on this host (every v1 controller, and v2).
pub fn cgroup_dirs(id: &BoxId) -> Vec<PathBuf> {
    let rel = format!("berth/{}", id.as_str());
    let mut dirs = vec![PathBuf::from("/sys/fs/cgroup").join(&rel)];
    if let Ok(entries) = std::fs::read_dir("/sys/fs/cgroup") {
        dirs.extend(entries.flatten().map(|e| e.path().join(&rel)));
    }
    dirs
}

/// A host directory to use as a layer: `files` as (relative path, content, mode), every
/// directory 0755 so the box's mapped ids can reach it. Removed on drop.
pub fn layer_dir(files: &[(&str, &str, u32)]) -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix("berth-layer-")
        .tempdir()
        .unwrap();
    let set = |p: &std::path::Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    set(dir.path(), 0o755);
    for (path, content, mode) in files {
        let path = dir.path().join(path);
        let parent = path.parent().unwrap();
        std::fs::create_dir_all(parent).unwrap();
        set(parent, 0o755);
        std::fs::write(&path, content).unwrap();
        set(&path, *mode);
    }
    dir
}
