//! What the CLI's integration tests share: the `berth` binary, and a real daemon
//! (`berth up`) on a temporary data dir that is stopped, with its boxes, when dropped.
#![allow(dead_code)] // each test binary uses a part

pub mod api_coverage;
pub mod daemon;
pub mod e2b;
mod follower;
mod processes;
pub mod sdk_suite;
pub mod terminal;

pub use daemon::Daemon;
#[allow(unused_imports)] // each test binary uses a part
pub use follower::Follower;
#[allow(unused_imports)]
pub use processes::{processes_naming, reset_peak_rss, vm_kib, vm_processes};

use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const BERTH: &str = env!("CARGO_BIN_EXE_berth");

/// A `berth` command with a clean environment: no daemon settings leak in from the host.
pub fn berth() -> Command {
    let mut cmd = Command::new(BERTH);
    cmd.env_remove("BERTH_URL")
        .env_remove("BERTH_API_KEY")
        .env_remove("BERTH_DATA_DIR")
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null());
    cmd
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A loopback port nothing listens on (bound, then released).
pub fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A failure is exactly one `berth: …` line on stderr.
pub fn assert_one_line_error(out: &Output, expected_status: i32, needles: &[&str]) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(expected_status), "stderr: {err}");
    assert!(err.starts_with("berth: "), "stderr: {err:?}");
    assert_eq!(err.trim_end().lines().count(), 1, "stderr: {err:?}");
    assert!(
        !err.contains("panicked") && !err.contains("backtrace"),
        "stderr: {err:?}"
    );
    for needle in needles {
        assert!(err.contains(needle), "{needle:?} not in {err:?}");
    }
}

/// A self-signed certificate for `names`, written into `dir` as `(<stem>.crt, <stem>.key)`.
pub fn self_signed(dir: &Path, stem: &str, names: &[&str]) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let names = names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>();
    let cert = rcgen::CertificateParams::new(names)
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (cert_path, key_path) = (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    );
    fs::write(&cert_path, cert.pem()).unwrap();
    fs::write(&key_path, key.serialize_pem()).unwrap();
    (cert_path, key_path)
}

/// Points the image store of `data_dir` at the tests' shared image cache
/// (`$BERTH_TEST_IMAGE_DIR`, else `/var/tmp/berth-test-images`), so `berth image build`
/// there reuses what an earlier test built. The built images are shared (content-addressed,
/// so tests with different berth-init builds never clash); what the daemon reads as built,
/// `built.json`, is this data dir's own: tests running side by side may build with other
/// binaries.
pub fn link_test_image_cache(data_dir: &Path) {
    let cache = berth_testkit::image_cache::dir().join("images");
    let images = data_dir.join("images");
    fs::create_dir_all(&images).unwrap();
    for part in ["apt", "initramfs", "kernel", "layers", "rootfs", "tmp"] {
        fs::create_dir_all(cache.join(part)).unwrap();
        if fs::read_link(images.join(part)).is_ok_and(|to| to == cache.join(part)) {
            continue; // linked already (a daemon that builds both a template's image and qemu's)
        }
        std::os::unix::fs::symlink(cache.join(part), images.join(part)).unwrap();
    }
}

pub fn health_ok(listen: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(listen) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /v1/health HTTP/1.1\r\nHost: {listen}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Waits for `child` to exit, for at most `within`; past it, kills it and says `None`.
pub fn wait_or_kill(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Why the end-to-end test cannot run here, if it cannot.
/// Runs `cmd` (stdin closed) with its stdout and stderr in the file `log`, for at most
/// `within` (then killed); answers its exit status (`None`: killed) and what it printed,
/// which it also shows on the test's stderr under `name`.
pub fn run_logged(
    cmd: &mut Command,
    name: &str,
    log: &Path,
    within: Duration,
) -> (Option<std::process::ExitStatus>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(fs::File::create(log).unwrap())
        .stderr(Stdio::from(
            fs::File::options().append(true).open(log).unwrap(),
        ))
        .spawn()
        .unwrap();
    let status = wait_or_kill(&mut child, within);
    let output = fs::read_to_string(log).unwrap_or_default();
    eprintln!("--- {name}\n{output}");
    (status, output)
}

pub fn e2e_skip_reason() -> Option<String> {
    if let Err(e) = berth_runtime::sandbox::SandboxRuntime::check_host("runc") {
        return Some(e.to_string());
    }
    if let Err(e) = berth_runtime::init_binary() {
        return Some(format!("no berth-init: {e}"));
    }
    None
}

/// A `berth.toml` whose `[store]` is a fresh database on `postgres` (password from a file).
pub fn store_on(postgres: &berth_testkit::postgres::PgServer) -> String {
    format!(
        "[store]\nurl = {:?}\npassword_file = {:?}\n",
        postgres.new_database(),
        postgres.password_file()
    )
}

/// An answer read off the wire: the status, every header as sent, the body.
pub struct RawAnswer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl RawAnswer {
    /// Every value of header `name` (any case).
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

/// One HTTP/1.1 request with a JSON body on a new connection to `authority`, read to its
/// end: for a test that must see headers exactly as sent (or send its own).
pub fn raw_request(
    authority: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> RawAnswer {
    use std::io::{Read as _, Write as _};
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    RawAnswer {
        status: head.split(' ').nth(1).unwrap().parse().unwrap(),
        headers: head
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(name, value)| (name.to_owned(), value.trim().to_owned()))
            .collect(),
        body: body.to_owned(),
    }
}
