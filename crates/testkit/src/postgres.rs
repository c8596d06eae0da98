//! The `postgres` part: a private PostgreSQL server that a test starts for itself from
//! Debian's binaries (`/usr/lib/postgresql/<N>/bin`, the highest N), so the store's
//! Postgres backend is tested against the real thing with no shared server to set up.
//!
//! Starting must be cheap, because nextest runs each test in its own process and every
//! conformance test starts its own server: `initdb` (~0.8 s) runs once per machine into a
//! cached template, made under a file lock so that parallel test processes wait for the
//! first instead of racing it; each server copies the template and starts on it (~0.1 s
//! together when the copy goes to `/dev/shm`; a disk's journal makes it 0.7 s).
//! The template fixes the password of user `berth` at initdb time, so every server made
//! from one template shares it: random per machine, not per server.
//!
//! Postgres refuses to run as root, and tests run as root here and in CI: then `initdb`,
//! `postgres` and `createdb` run as the `postgres` system user (or `nobody`).
//!
//! No server may outlive its test, even one that is SIGKILLed: the postmaster gets SIGQUIT
//! (immediate shutdown) when the thread that spawned it exits. Tests run on threads that end,
//! so every postmaster is spawned by one helper thread that lives as long as the process.

use std::ffi::CStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::os::unix::io::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

/// Where Debian installs each major version's binaries, one directory per version.
const DEBIAN_ROOT: &str = "/usr/lib/postgresql";
/// The role every test connects as; initdb makes it the superuser.
const USER: &str = "berth";
/// How long a copied server may take to accept connections: generous, so a loaded CI
/// machine running many test processes at once is slow rather than failed.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long an immediate shutdown may take before the postmaster is SIGKILLed.
const STOP_DEADLINE: Duration = Duration::from_secs(10);
/// How often a free port may be taken by someone else between choosing and binding it.
const PORT_ATTEMPTS: u32 = 5;
/// How often the start and stop conditions are polled.
const POLL: Duration = Duration::from_millis(10);

/// A running server, stopped and removed (data, log, password file) on drop.
pub struct PgServer {
    postmaster: Child,
    port: u16,
    password: String,
    password_file: PathBuf,
    binaries: Binaries,
    run_as: Option<RunAs>,
    databases: AtomicU32,
    dir: tempfile::TempDir,
}

impl PgServer {
    /// None after `crate::skip("postgres", why)` when the binaries are missing.
    pub fn start() -> Option<PgServer> {
        let binaries = match Binaries::find(Path::new(DEBIAN_ROOT)) {
            Ok(binaries) => binaries,
            Err(why) => {
                crate::skip("postgres", why);
                return None;
            }
        };
        let run_as = RunAs::for_this_process();
        let template = Template::get(&binaries, run_as);

        let dir = server_dir(&template, run_as);
        let (data, sockets, log) = (
            dir.path().join("data"),
            dir.path().join("sockets"),
            dir.path().join("postgres.log"),
        );

        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            if let Some(postmaster) = launch(&binaries, run_as, &data, &sockets, port, &log) {
                return Some(PgServer {
                    postmaster,
                    port,
                    password: template.password,
                    password_file: dir.path().join("password"),
                    binaries,
                    run_as,
                    databases: AtomicU32::new(0),
                    dir,
                });
            }
        }
        panic!(
            "postgres: the chosen port was taken {PORT_ATTEMPTS} times in a row; log:\n{}",
            tail(&log)
        );
    }

    /// A fresh, empty database on this server, as a URL without the password:
    /// `postgres://berth@127.0.0.1:PORT/NAME` (NAME unique per call, e.g. t1, t2...).
    pub fn new_database(&self) -> String {
        let name = format!("t{}", self.databases.fetch_add(1, Ordering::Relaxed) + 1);
        let mut createdb = Command::new(self.binaries.dir.join("createdb"));
        createdb
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                &name,
            ])
            // The environment, not argv: argv is visible to every user in `ps`.
            .env("PGPASSWORD", &self.password)
            .stdin(Stdio::null());
        let out = unprivileged(&mut createdb, self.run_as)
            .output()
            .expect("postgres: run createdb");
        assert!(
            out.status.success(),
            "postgres: createdb {name} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        format!("postgres://{USER}@127.0.0.1:{}/{name}", self.port)
    }

    /// The password of user `berth`: 32 random hex chars, drawn once per template (machine
    /// and major version), not per server, because initdb fixes it in the data every server
    /// copies.
    pub fn password(&self) -> &str {
        &self.password
    }

    /// A file (mode 0600, readable by the test) holding only the password.
    pub fn password_file(&self) -> &Path {
        &self.password_file
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A program of this server's version (`psql`, `pg_dump`), for a test to look inside.
    pub fn bin(&self, program: &str) -> PathBuf {
        self.binaries.dir.join(program)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        // SAFETY: kill(2) has no memory preconditions; the pid is our child that has not
        // been waited for, so it cannot have been reused by another process.
        unsafe { libc::kill(self.postmaster.id() as libc::pid_t, libc::SIGQUIT) };
        let deadline = Instant::now() + STOP_DEADLINE;
        while matches!(self.postmaster.try_wait(), Ok(None)) {
            if Instant::now() >= deadline {
                let _ = self.postmaster.kill();
                let _ = self.postmaster.wait();
                break;
            }
            std::thread::sleep(POLL);
        }
        // Removed here, after the stop, to report a failure; TempDir's drop then finds nothing.
        if let Err(e) = fs::remove_dir_all(self.dir.path()) {
            eprintln!("postgres: remove {}: {e}", self.dir.path().display());
        }
    }
}

/// One major version's binaries.
#[derive(Debug, Clone)]
struct Binaries {
    major: u32,
    dir: PathBuf,
}

impl Binaries {
    /// The highest major version under `root` that has the three programs a server needs.
    fn find(root: &Path) -> Result<Binaries, String> {
        let entries = fs::read_dir(root).map_err(|e| {
            format!(
                "no {} ({e}): Debian's `postgresql` package is not installed",
                root.display()
            )
        })?;
        entries
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
                let dir = entry.path().join("bin");
                ["initdb", "postgres", "createdb"]
                    .iter()
                    .all(|program| is_executable(&dir.join(program)))
                    .then_some(Binaries { major, dir })
            })
            .max_by_key(|binaries| binaries.major)
            .ok_or_else(|| {
                format!(
                    "no {}/<N>/bin with initdb, postgres and createdb (Debian's `postgresql`)",
                    root.display()
                )
            })
    }
}

/// The unprivileged user that runs postgres's programs when this process is root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunAs {
    uid: libc::uid_t,
    gid: libc::gid_t,
}

impl RunAs {
    /// None when this process is not root: then the programs run as this process's user.
    fn for_this_process() -> Option<RunAs> {
        // SAFETY: geteuid(2) has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        let user = RunAs::lookup(c"postgres").or_else(|| RunAs::lookup(c"nobody"));
        Some(user.expect("postgres: running as root, but neither `postgres` nor `nobody` exists"))
    }

    fn lookup(name: &CStr) -> Option<RunAs> {
        // SAFETY: `passwd` is plain integers and pointers, for which all-zero is valid.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut strings = vec![0 as libc::c_char; 16 * 1024];
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: `name` is NUL-terminated, `entry` and
        // `found` are live locals, `strings` is writable for the length passed. The reentrant
        // form, because other tests' threads may look users up at the same time.
        let rc = unsafe {
            libc::getpwnam_r(
                name.as_ptr(),
                &mut entry,
                strings.as_mut_ptr(),
                strings.len(),
                &mut found,
            )
        };
        (rc == 0 && !found.is_null()).then_some(RunAs {
            uid: entry.pw_uid,
            gid: entry.pw_gid,
        })
    }

    fn chown(self, path: &Path) {
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
            .unwrap_or_else(|e| panic!("postgres: chown {}: {e}", path.display()));
    }
}

/// Makes `command` run as `run_as` (when root), killed with SIGQUIT when the spawning thread
/// exits, and from `/` (a test's working directory may be closed to `run_as`).
fn unprivileged(command: &mut Command, run_as: Option<RunAs>) -> &mut Command {
    let parent = std::process::id() as libc::pid_t;
    command.current_dir("/");
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: `become_child` makes raw syscalls and neither allocates nor locks.
    unsafe { command.pre_exec(move || become_child(run_as, parent)) }
}

/// In the forked child: drops to `run_as`, then asks for SIGQUIT when the parent thread
/// exits (after the drop, which would clear it), then checks the parent did not exit first.
fn become_child(run_as: Option<RunAs>, parent: libc::pid_t) -> io::Result<()> {
    if let Some(user) = run_as {
        // SAFETY: plain syscalls on integers; setgroups is given a count of 0 and no list.
        let dropped = unsafe {
            libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(user.gid) == 0
                && libc::setuid(user.uid) == 0
        };
        if !dropped {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: PR_SET_PDEATHSIG takes one integer argument, passed at the width it reads.
    if unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT as libc::c_ulong) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getppid(2) has no preconditions and cannot fail.
    if unsafe { libc::getppid() } != parent {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

/// The initdb'd data dir that every server copies, and its password.
struct Template {
    data: PathBuf,
    password: String,
}

impl Template {
    /// The template for these binaries, made first if no process has made it yet.
    fn get(binaries: &Binaries, run_as: Option<RunAs>) -> Template {
        let cache = cache_dir();
        // The uid is the data files' owner: postgres refuses a data dir owned by another.
        let owner = run_as.map_or_else(effective_uid, |user| user.uid);
        let name = format!("pg{}-uid{owner}", binaries.major);
        let data = cache.join(&name);
        let password_path = cache.join(format!("{name}.password"));

        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(cache.join(format!("{name}.lock")))
            .expect("postgres: open the template's lock file");
        lock_exclusive(&lock);
        if !data.exists() {
            make(binaries, run_as, &cache, &name);
        }
        drop(lock);

        let password = fs::read_to_string(&password_path)
            .unwrap_or_else(|e| panic!("postgres: read {}: {e}", password_path.display()));
        Template {
            data,
            password: password.trim().to_owned(),
        }
    }
}

/// Under the template's lock: initdb into a temp dir, then copy it in under a temporary
/// name and rename it into place, after its password file, so that the template's presence
/// means it is whole. The temp dir is under `/tmp`, which `run_as` can reach when the cache
/// (inside a root-only build tree) is closed to it.
fn make(binaries: &Binaries, run_as: Option<RunAs>, cache: &Path, name: &str) {
    // Leftovers of a process killed while holding the lock.
    let partial = format!("{name}.tmp-");
    for entry in fs::read_dir(cache).into_iter().flatten().flatten() {
        if entry.file_name().to_string_lossy().starts_with(&partial) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }

    let staging = tempfile::Builder::new()
        .prefix("berth-pg-initdb-")
        .tempdir()
        .expect("postgres: create initdb's temp dir");
    if let Some(user) = run_as {
        user.chown(staging.path());
    }
    let password = random_hex();
    let pwfile = staging.path().join("pwfile");
    write_private(&pwfile, &password);
    if let Some(user) = run_as {
        user.chown(&pwfile);
    }
    let staged = staging.path().join("data");
    let mut initdb = Command::new(binaries.dir.join("initdb"));
    initdb
        .arg("-D")
        .arg(&staged)
        .args([
            "-U",
            USER,
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
        ])
        .arg(format!("--pwfile={}", pwfile.display()))
        .args(["--no-sync", "--no-instructions", "-E", "UTF8", "--locale=C"])
        .stdin(Stdio::null());
    let out = unprivileged(&mut initdb, run_as)
        .output()
        .expect("postgres: run initdb");
    assert!(
        out.status.success(),
        "postgres: initdb failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let pid = std::process::id();
    let password_path = cache.join(format!("{name}.password"));
    let password_tmp = cache.join(format!("{partial}{pid}.password"));
    write_private(&password_tmp, &password);
    fs::rename(&password_tmp, &password_path).expect("postgres: rename the template's password");
    let data_tmp = cache.join(format!("{partial}{pid}"));
    copy_tree(&staged, &data_tmp);
    fs::rename(&data_tmp, cache.join(name)).expect("postgres: rename the template into place");
}

/// The directory of templates: `$CARGO_TARGET_TMPDIR` when set, else one per user in the
/// system's temp dir, which must then be this user's own (it is shared with every user).
fn cache_dir() -> PathBuf {
    let dir = match std::env::var_os("CARGO_TARGET_TMPDIR") {
        Some(tmp) => PathBuf::from(tmp).join("berth-pg-template"),
        None => std::env::temp_dir().join(format!("berth-pg-template-{}", effective_uid())),
    };
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o711)
        .create(&dir)
    {
        Ok(()) => {}
        Err(e) => panic!("postgres: create {}: {e}", dir.display()),
    }
    let owner = std::os::unix::fs::MetadataExt::uid(
        &fs::metadata(&dir).unwrap_or_else(|e| panic!("postgres: {}: {e}", dir.display())),
    );
    assert_eq!(
        owner,
        effective_uid(),
        "postgres: {} belongs to another user",
        dir.display()
    );
    dir
}

/// A server's own dir: `data` (the template's copy), `sockets`, and `password` (0600).
fn server_dir(template: &Template, run_as: Option<RunAs>) -> tempfile::TempDir {
    sweep_stale(&server_root());
    let dir = tempfile::Builder::new()
        .prefix("berth-pg-")
        .tempdir_in(server_root())
        .expect("postgres: create the server's temp dir");
    // The server's user passes through to its data and socket dirs, lists nothing.
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711))
        .expect("postgres: chmod the server's temp dir");
    copy_tree(&template.data, &dir.path().join("data"));
    make_private_dir(&dir.path().join("sockets"), run_as);
    write_private(&dir.path().join("password"), &template.password);
    dir
}

/// Where servers' dirs go: `/dev/shm` when it is a memory file system with room for a few
/// servers, because a data dir is ~1000 files and a disk's journal makes creating each one
/// cost (0.7 s per copy on ext4 here, 0.06 s on tmpfs; `createdb` copies ~300 more). Else
/// the system's temp dir.
/// Removes the dirs of servers whose test was killed before it could (on `/dev/shm` they
/// hold memory): a dir older than [`STALE_AFTER`] whose postmaster is not running. A dir
/// being set up has no pid file yet, which is why only old ones are looked at.
fn sweep_stale(root: &Path) {
    const STALE_AFTER: Duration = Duration::from_secs(600);
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let named = entry.file_name().to_string_lossy().starts_with("berth-pg-");
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|modified| modified.elapsed().ok())
            .is_some_and(|age| age > STALE_AFTER);
        if !named || !old {
            continue;
        }
        let pid = fs::read_to_string(path.join("data/postmaster.pid"))
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse::<libc::pid_t>().ok());
        // SAFETY: kill(2) with signal 0 only asks whether the process exists.
        let running = pid.is_some_and(|pid| unsafe { libc::kill(pid, 0) } == 0);
        if !running {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

fn server_root() -> PathBuf {
    const SHM: &CStr = c"/dev/shm";
    const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
    const ROOM_BYTES: u64 = 512 << 20;
    // SAFETY: `statfs` is plain integers, for which all-zero is valid.
    let mut fs_info: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the path is NUL-terminated and `fs_info` is a live, writable local.
    let known = unsafe { libc::statfs(SHM.as_ptr(), &mut fs_info) } == 0;
    let roomy = known
        && fs_info.f_type as libc::c_long == TMPFS_MAGIC
        && (fs_info.f_bavail as u64).saturating_mul(fs_info.f_bsize as u64) >= ROOM_BYTES;
    if roomy {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    }
}

/// Starts the postmaster on `port`; its Child once it accepts connections, None when the
/// port was taken meanwhile. Panics with the log's tail on any other failure.
fn launch(
    binaries: &Binaries,
    run_as: Option<RunAs>,
    data: &Path,
    sockets: &Path,
    port: u16,
    log: &Path,
) -> Option<Child> {
    let log_file = File::create(log).expect("postgres: create the server log");
    let mut postgres = Command::new(binaries.dir.join("postgres"));
    postgres
        .arg("-D")
        .arg(data)
        .args(["-p", &port.to_string()])
        .arg("-k")
        .arg(sockets)
        .args(["-c", "listen_addresses=127.0.0.1"])
        // A test's data need not survive a crash of the machine.
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
        .args(["-c", "full_page_writes=off"])
        .args(["-c", "max_connections=200", "-c", "shared_buffers=16MB"])
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("postgres: dup the log"))
        .stderr(log_file);
    unprivileged(&mut postgres, run_as);
    let mut postmaster = spawn_from_helper(postgres).expect("postgres: spawn the postmaster");

    let pid_file = data.join("postmaster.pid");
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if let Ok(Some(status)) = postmaster.try_wait() {
            let log_text = tail(log);
            if log_text.contains("Address already in use") {
                return None;
            }
            panic!("postgres: the server exited ({status}) while starting; log:\n{log_text}");
        }
        let ready = fs::read_to_string(&pid_file)
            .is_ok_and(|text| postmaster_status(&text) == Some("ready"));
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        if ready && TcpStream::connect_timeout(&local, Duration::from_secs(1)).is_ok() {
            return Some(postmaster);
        }
        if Instant::now() >= deadline {
            let _ = postmaster.kill();
            let _ = postmaster.wait();
            panic!(
                "postgres: not ready on port {port} after {START_DEADLINE:?}; log:\n{}",
                tail(log)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// The postmaster's state in its pid file: the eighth line, `starting`, `ready`, ...
fn postmaster_status(pid_file: &str) -> Option<&str> {
    pid_file.lines().nth(7).map(str::trim)
}

/// Spawns `command` from the helper thread, which never exits, so that the child's
/// parent-death signal fires only when this process dies.
fn spawn_from_helper(command: Command) -> io::Result<Child> {
    type Request = (Command, mpsc::Sender<io::Result<Child>>);
    static HELPER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
    let helper = HELPER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("berth-pg-spawner".into())
            .spawn(move || {
                // Ends only with the process: the static sender is never dropped.
                for (mut command, reply) in incoming {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("postgres: start the spawner thread");
        requests
    });
    let (reply, answer) = mpsc::channel();
    helper
        .send((command, reply))
        .expect("postgres: the spawner thread is gone");
    answer.recv().expect("postgres: the spawner thread is gone")
}

/// `cp -a`: keeps owners and modes, which postgres checks on its data dir.
fn copy_tree(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .expect("postgres: run cp");
    assert!(
        out.status.success(),
        "postgres: cp -a {} {}: {}",
        from.display(),
        to.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn make_private_dir(path: &Path, run_as: Option<RunAs>) {
    fs::DirBuilder::new()
        .mode(0o700)
        .create(path)
        .unwrap_or_else(|e| panic!("postgres: create {}: {e}", path.display()));
    if let Some(user) = run_as {
        user.chown(path);
    }
}

/// Creates `path` (which must not exist) with mode 0600, holding `text`.
fn write_private(path: &Path, text: &str) {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .unwrap_or_else(|e| panic!("postgres: write {}: {e}", path.display()));
}

/// Blocks until this process holds an exclusive lock on `file`; closing it releases it.
fn lock_exclusive(file: &File) {
    loop {
        // SAFETY: the descriptor is open for the whole call, owned by `file`.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return;
        }
        let e = io::Error::last_os_error();
        assert_eq!(e.kind(), io::ErrorKind::Interrupted, "postgres: flock: {e}");
    }
}

/// 128 random bits as 32 hex chars.
fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .expect("postgres: read /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A port nothing listens on now; it may be taken before the server binds it.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("postgres: bind a free port")
        .port()
}

/// The last 40 lines of the log, for a panic's message.
fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_else(|e| format!("({}: {e})", log.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

fn effective_uid() -> libc::uid_t {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `psql` runs `sql` against `url` with `password`; its stdout, or its stderr as Err.
    fn psql(server: &PgServer, url: &str, password: &str, sql: &str) -> Result<String, String> {
        let beside = server.binaries.dir.join("psql");
        let program = if is_executable(&beside) {
            beside
        } else {
            PathBuf::from("psql")
        };
        let out = Command::new(program)
            .args(["-X", "-A", "-t", "-d", url, "-c", sql])
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    #[test]
    fn the_dirs_of_killed_servers_are_swept_and_no_other() {
        let root = tempfile::tempdir().unwrap();
        let make = |name: &str, pid: Option<u32>, age: Duration| {
            let dir = root.path().join(name);
            fs::create_dir_all(dir.join("data")).unwrap();
            if let Some(pid) = pid {
                fs::write(dir.join("data/postmaster.pid"), format!("{pid}\n/x\n")).unwrap();
            }
            let then = std::time::SystemTime::now() - age;
            File::open(&dir).unwrap().set_modified(then).unwrap();
            dir
        };
        let hour = Duration::from_secs(3600);
        let dead = make("berth-pg-dead", None, hour);
        let live = make("berth-pg-live", Some(std::process::id()), hour);
        let young = make("berth-pg-young", None, Duration::ZERO);
        let other = make("something-else", None, hour);
        sweep_stale(root.path());
        assert!(!dead.exists(), "a killed server's old dir goes");
        assert!(live.exists(), "a running postmaster's dir stays");
        assert!(young.exists(), "a dir being set up stays");
        assert!(other.exists(), "only berth-pg-* dirs are looked at");
    }

    #[test]
    fn a_server_serves_fresh_databases_to_its_password_only_and_leaves_nothing_behind() {
        let Some(server) = PgServer::start() else {
            return;
        };
        let port = server.port();
        let first = server.new_database();
        let second = server.new_database();
        assert_eq!(first, format!("postgres://berth@127.0.0.1:{port}/t1"));
        assert_eq!(second, format!("postgres://berth@127.0.0.1:{port}/t2"));

        let password = server.password().to_owned();
        assert_eq!(password.len(), 32, "{password}");
        assert!(
            password.bytes().all(|b| b.is_ascii_hexdigit()),
            "{password}"
        );
        let file = server.password_file();
        assert_eq!(fs::read_to_string(file).unwrap(), password);
        assert_eq!(
            fs::metadata(file).unwrap().permissions().mode() & 0o777,
            0o600
        );

        for url in [&first, &second] {
            assert_eq!(
                psql(&server, url, &password, "SELECT 1").as_deref(),
                Ok("1")
            );
        }
        let tables = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'";
        assert_eq!(
            psql(&server, &second, &password, tables).as_deref(),
            Ok("0")
        );
        let refused = psql(&server, &first, "not-the-password", "SELECT 1").unwrap_err();
        assert!(
            refused.contains("password authentication failed"),
            "{refused}"
        );

        // Postgres refuses root, and here is why: the server never runs as root.
        let status = fs::read_to_string(format!("/proc/{}/status", server.postmaster.id()));
        let uid_line = status
            .unwrap()
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap()
            .to_owned();
        assert!(
            uid_line.split_whitespace().skip(1).all(|uid| uid != "0"),
            "{uid_line}"
        );

        let dir = server.dir.path().to_owned();
        drop(server);
        assert!(!dir.exists(), "{} is left behind", dir.display());
        let local = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        assert!(
            TcpStream::connect_timeout(&local, Duration::from_secs(1)).is_err(),
            "port {port} still accepts connections after drop"
        );
    }

    #[test]
    fn a_port_taken_meanwhile_is_reported_for_another_try() {
        let binaries = match Binaries::find(Path::new(DEBIAN_ROOT)) {
            Ok(binaries) => binaries,
            Err(why) => return crate::skip("postgres", why),
        };
        let run_as = RunAs::for_this_process();
        let dir = server_dir(&Template::get(&binaries, run_as), run_as);
        let taken = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = taken.local_addr().unwrap().port();
        let (data, sockets) = (dir.path().join("data"), dir.path().join("sockets"));
        let log = dir.path().join("postgres.log");
        assert!(launch(&binaries, run_as, &data, &sockets, port, &log).is_none());
        assert!(
            tail(&log).contains("Address already in use"),
            "{}",
            tail(&log)
        );
    }

    #[test]
    fn the_highest_major_version_with_all_three_programs_is_chosen() {
        let root = tempfile::tempdir().unwrap();
        let install = |major: &str, programs: &[&str]| {
            let bin = root.path().join(major).join("bin");
            fs::create_dir_all(&bin).unwrap();
            for program in programs {
                let path = bin.join(program);
                fs::write(&path, "").unwrap();
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
            }
        };
        install("13", &["initdb", "postgres", "createdb"]);
        install("15", &["initdb", "postgres", "createdb"]);
        install("16", &["initdb", "postgres"]);
        install("common", &["initdb", "postgres", "createdb"]);
        let found = Binaries::find(root.path()).unwrap();
        assert_eq!(found.major, 15);
        assert_eq!(found.dir, root.path().join("15/bin"));

        let none = Binaries::find(&root.path().join("absent")).unwrap_err();
        assert!(none.contains("`postgresql`"), "{none}");
    }

    #[test]
    fn the_status_is_the_pid_files_eighth_line() {
        let starting = "123\n/data\n1700000000\n5432\n/sock\n127.0.0.1\n  0 0\nstarting\n";
        assert_eq!(postmaster_status(starting), Some("starting"));
        let ready = starting.replace("starting", "ready   ");
        assert_eq!(postmaster_status(&ready), Some("ready"));
        assert_eq!(postmaster_status("123\n/data\n"), None);
    }
}
