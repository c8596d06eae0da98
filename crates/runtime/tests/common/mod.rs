//! The runtime tests' fixtures: one backend per test with its own data dir ([`fixture`]),
//! the VM images ([`images`]), fresh box specs, exec helpers and host-side probes.

pub mod fixture;
pub mod images;
pub mod vm;

pub use fixture::{Backend, Fixture};

use std::future::Future;
use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use berth_protocol::guest::{BoxUser, ExecFrame, ExecRequest, FileQuery};
use berth_protocol::BoxId;
use berth_runtime::{BootToken, BoxSpec, GuestClient, IdMap, Limits, Rootfs, Runtime};

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
        memory: None,
        services: Vec::new(),
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

/// Runs `argv`, asserting it exits 0 within 60 s (a wedged guest channel fails the test
/// instead of hanging it); its stdout.
pub async fn run_ok(client: &GuestClient, argv: &[&str], user: BoxUser) -> String {
    let (code, out, err) = tokio::time::timeout(
        Duration::from_secs(60),
        run(client, argv, user, Some(Duration::from_secs(30))),
    )
    .await
    .unwrap_or_else(|_| panic!("{argv:?} got no answer within 60 s"));
    assert_eq!(code, 0, "{argv:?} as {user:?} failed: {err}");
    out
}

/// Polls `check` with a short backoff until it holds; panics after 15 s.
pub async fn wait_until<F, Fut>(check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_until_within(Duration::from_secs(15), check).await
}

/// Polls `check` with a short backoff until it holds; panics after `limit`.
pub async fn wait_until_within<F, Fut>(limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    let mut backoff = Duration::from_millis(5);
    while !check().await {
        assert!(
            started.elapsed() < limit,
            "condition not reached in {limit:?}"
        );
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_millis(200));
    }
}

/// A deadline for work that takes a guest at most `boots` times as long as it took to
/// boot, never under two minutes: a box's boot is its measured speed on this host now
/// (KVM or TCG, idle or loaded), so a slow guest gets a longer wait, not a failure.
pub fn scaled_by(boot: Duration, boots: u32) -> Duration {
    (boot * boots).max(Duration::from_secs(120))
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

/// Live host pids whose command line contains `needle` (a VM's QEMU and
/// the channel bridge name files in its box dir).
pub fn host_pids_mentioning(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me && !is_zombie(pid))
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(needle))
        })
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

/// A query for the file or directory at `path` in the box.
pub fn file(path: &str) -> FileQuery {
    FileQuery {
        path: path.into(),
        ..Default::default()
    }
}

/// berth-init is the box's PID 1.
pub async fn assert_berth_init_is_pid_1(client: &GuestClient) {
    assert_eq!(
        run_ok(client, &["cat", "/proc/1/comm"], BoxUser::User)
            .await
            .trim(),
        "berth-init"
    );
}

/// The spec of the box's next boot: a fresh token, as the daemon mints one per boot.
pub fn next_boot(spec: &BoxSpec) -> BoxSpec {
    let mut again = spec.clone();
    again.boot_token = token();
    again
}

/// The previous boot's token opens nothing on the box's current boot.
pub async fn assert_old_token_refused(runtime: &dyn Runtime, old: &BoxSpec) {
    let client = runtime.channel(&old.id, &old.boot_token);
    match client.info().await {
        Err(berth_runtime::GuestError::Remote { status: 401, .. }) => {}
        other => panic!("the old token must get 401, got {other:?}"),
    }
}

/// A shell that counts in its own memory, writing `<its pid> <count>` to `/tmp/counter`:
/// the same process counting on from where it was shows memory and processes were kept.
pub const COUNTER: &str =
    "i=0; while :; do i=$((i+1)); echo \"$$ $i\" > /tmp/counter; sleep 0.05; done";

/// `(pid, count)` of the counter once it has counted past `past`.
pub async fn counted_past(client: &GuestClient, past: u64) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, out, _) = run(client, &["cat", "/tmp/counter"], BoxUser::User, None).await;
        let mut parts = out
            .split_whitespace()
            .map(|p| p.parse::<u64>().unwrap_or(0));
        let now = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        if code == 0 && now.1 > past {
            return now;
        }
        assert!(Instant::now() < deadline, "the counter stays at {now:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts [`COUNTER`] in the box as the box user.
pub async fn start_counter(client: &GuestClient) {
    let counter = berth_protocol::process::ProcessRequest {
        exec: ExecRequest {
            argv: ["sh", "-c", COUNTER]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            user: BoxUser::User,
            ..Default::default()
        },
        keep_awake: false,
        open_stdin: false,
        tag: None,
    };
    client
        .process_start(&counter)
        .await
        .expect("start the counter");
}
