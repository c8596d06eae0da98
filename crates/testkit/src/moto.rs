//! The `moto` part: a private S3 stand-in for a test. moto's server (PyPI's `moto[server]`,
//! pinned at [`PINNED`], in a venv under the workspace's `target/moto` that
//! `scripts/install-deps.sh --tests` makes and keeps) runs on 127.0.0.1 at a free port,
//! from its own temporary directory, with one bucket made; it is killed, waited for, and
//! its directory removed when the [`Moto`] is dropped.
//!
//! moto keeps objects in memory (large ones spill to its temporary directory), accepts any
//! credentials, and lists what was written before the listing: what a chunk store needs of
//! S3. Give a client its settings with [`Moto::var`] rather than the process's environment,
//! which every test thread shares.
//!
//! The server gets SIGKILL when the thread that started it exits, so a test that is killed
//! leaves none behind: start it on the thread that holds it (the test's own).

use std::fs::{self, File};
use std::io::{self, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The moto version the tests run (`scripts/install-deps.sh` pins the same).
pub const PINNED: &str = "5.2.5";
/// The bucket [`Moto::start`] makes.
pub const BUCKET: &str = "berth-test";
/// Credentials moto accepts (it accepts any).
const ACCESS_KEY_ID: &str = "berth-test-key";
const SECRET_ACCESS_KEY: &str = "berth-test-secret";
const REGION: &str = "us-east-1";
/// How long moto may take to answer: its imports take a second or two, more on a loaded
/// 2-core machine running other tests.
const START_DEADLINE: Duration = Duration::from_secs(90);
/// How often a free port may be taken by someone else between choosing and binding it.
const PORT_ATTEMPTS: u32 = 5;
/// How often the start condition is polled.
const POLL: Duration = Duration::from_millis(50);

/// A running moto server with [`BUCKET`] made.
pub struct Moto {
    server: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Moto {
    /// None after `crate::skip("moto", why)` when the pinned moto is missing.
    pub fn start() -> Option<Moto> {
        let python = match python() {
            Ok(python) => python,
            Err(why) => {
                crate::skip("moto", why);
                return None;
            }
        };
        let dir = tempfile::Builder::new()
            .prefix("berth-moto-")
            .tempdir()
            .expect("moto: create its temp dir");
        let log = dir.path().join("moto.log");
        for _ in 0..PORT_ATTEMPTS {
            let port = free_port();
            if let Some(server) = launch(&python, dir.path(), port, &log) {
                return Some(Moto { server, port, dir });
            }
        }
        panic!(
            "moto: the chosen port was taken {PORT_ATTEMPTS} times in a row; log:\n{}",
            tail(&log)
        );
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `s3://berth-test/<prefix>`.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{}", prefix.trim_start_matches('/'))
    }

    /// The `AWS_*` settings an S3 client needs to reach this server: endpoint (path-style,
    /// plain http), credentials and region.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_owned()),
            ("AWS_REGION", REGION.to_owned()),
        ]
    }

    /// [`Moto::env`] as a lookup: the value of `name`, None for any other variable.
    pub fn var(&self, name: &str) -> Option<String> {
        self.env()
            .into_iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
    }

    /// Makes another bucket (for a test that wants two stores apart).
    pub fn create_bucket(&self, bucket: &str) -> io::Result<()> {
        match put_bucket(self.port, bucket)? {
            200 => Ok(()),
            status => Err(io::Error::other(format!(
                "moto answered {status} to PUT /{bucket}"
            ))),
        }
    }

    /// The server's log so far (one line a request), for a failing test's message.
    pub fn log(&self) -> String {
        tail(&self.dir.path().join("moto.log"))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // moto holds nothing worth a clean shutdown: its objects go with it.
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// The venv's Python, with the pinned moto importable, or why there is none (for
/// [`crate::skip`] with `moto`).
pub fn python() -> Result<PathBuf, String> {
    let python = crate::pinned_python::target_dir("moto/venv/bin/python");
    crate::pinned_python::check(
        python,
        "moto.server",
        "moto",
        PINNED,
        "scripts/install-deps.sh --tests makes it",
    )
}

/// Starts moto on `port`; its Child once it answers with the bucket made, None when the
/// port was taken meanwhile. Panics with the log's tail on any other failure.
fn launch(python: &Path, dir: &Path, port: u16, log: &Path) -> Option<Child> {
    let log_file = File::create(log).expect("moto: create its log");
    let parent = std::process::id() as libc::pid_t;
    let mut command = Command::new(python);
    command
        .args([
            "-m",
            "moto.server",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
        ])
        .current_dir(dir)
        .env("TMPDIR", dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("moto: dup its log"))
        .stderr(log_file);
    // SAFETY: the hook runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: prctl(2) and getppid(2) are plain syscalls that neither allocate
    // nor lock.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have exited before the prctl: then nothing would kill us.
            if libc::getppid() != parent {
                return Err(io::Error::other("the test exited while moto was starting"));
            }
            Ok(())
        })
    };
    let mut server = command.spawn().expect("moto: spawn its server");

    let deadline = Instant::now() + START_DEADLINE;
    loop {
        if let Ok(Some(status)) = server.try_wait() {
            let log_text = tail(log);
            if log_text.contains("Address already in use") {
                return None;
            }
            panic!("moto: the server exited ({status}) while starting; log:\n{log_text}");
        }
        // Ready once it answers; the first answer makes the bucket too.
        if let Ok(status) = put_bucket(port, BUCKET) {
            if status == 200 {
                return Some(server);
            }
            let _ = server.kill();
            let _ = server.wait();
            panic!("moto: PUT /{BUCKET} answered {status}; log:\n{}", tail(log));
        }
        if Instant::now() >= deadline {
            let _ = server.kill();
            let _ = server.wait();
            panic!(
                "moto: no answer on port {port} after {START_DEADLINE:?}; log:\n{}",
                tail(log)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// `PUT /<bucket>` (CreateBucket; moto needs no signature), answering the HTTP status.
fn put_bucket(port: u16, bucket: &str) -> io::Result<u16> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&address, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    text.lines()
        .next()
        .and_then(|status_line| status_line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| io::Error::other(format!("not an HTTP answer: {:.200}", text)))
}

/// A port nothing listens on now; it may be taken before the server binds it.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .expect("moto: bind a free port")
        .port()
}

/// The last 40 lines of the log.
fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_else(|e| format!("({}: {e})", log.display()));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_answers_with_its_bucket_and_is_gone_after_drop() {
        let Some(moto) = Moto::start() else {
            return;
        };
        assert_eq!(moto.var("AWS_ENDPOINT_URL"), Some(moto.endpoint()));
        assert_eq!(moto.var("AWS_REGION").as_deref(), Some(REGION));
        assert_eq!(moto.var("HOME"), None);
        assert_eq!(moto.url("/p/q"), "s3://berth-test/p/q");
        moto.create_bucket("another").unwrap();
        // An existing bucket is answered too: the server is moto, not something else.
        assert_eq!(put_bucket(moto.port(), BUCKET).unwrap(), 200);

        let (port, dir) = (moto.port(), moto.dir.path().to_owned());
        drop(moto);
        assert!(!dir.exists(), "{} is left behind", dir.display());
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        assert!(
            TcpStream::connect_timeout(&address, Duration::from_secs(1)).is_err(),
            "port {port} still answers after drop"
        );
    }
}
