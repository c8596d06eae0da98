//! The daemon never buffers what a box or a client controls without a bound (issue 11, §2).
//!
//! A real daemon runs inside a memory cgroup of 512 MiB with a real sandbox box, and each
//! attack is made over real HTTP: reading `/dev/zero`, a FIFO, a symlink the box planted to
//! `/dev/zero`, a file that keeps growing while it is read, and several large uploads at
//! once. Each must end in a clear error or a bounded answer; the daemon's peak RSS
//! (`VmHWM`, reset before each case) must stay within [`RSS_GROWTH_BOUND`] of its resting
//! RSS; and the daemon must go on serving: an exec in a second box works afterwards.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{e2e_skip_reason, reset_peak_rss, vm_kib, Daemon};

const MIB: u64 = 1024 * 1024;
/// How much the daemon's peak RSS may pass its resting RSS during one case. Streaming keeps
/// a few hyper buffers per open request (well under 1 MiB each) and at most one bounded
/// NDJSON line per guest stream (8 MiB); 96 MiB leaves room for the allocator's arenas and
/// the runtime's threads, while every attack here, buffered, takes 256 MiB or more (or
/// grows until the cgroup's OOM killer ends the daemon).
const RSS_GROWTH_BOUND: u64 = 96 * MIB;
const MEMORY_LIMIT: u64 = 512 * MIB;
/// Uploads sent at once: more than the daemon's cap, so some must be refused.
const UPLOADS: usize = 8;
const UPLOAD_BYTES: u64 = 64 * MIB;
/// The one file of the archive streamed in and out.
const ARCHIVE_FILE_BYTES: u64 = 320 * MIB;

#[test]
fn the_daemon_survives_unbounded_bodies_within_a_memory_cgroup() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let cgroup = match MemoryCgroup::create(MEMORY_LIMIT) {
        Ok(cgroup) => cgroup,
        Err(reason) => {
            berth_testkit::skip("memory-cgroup", &reason);
            return;
        }
    };
    // Declared after the cgroup: dropped (stopped) first, so the cgroup is empty at removal.
    let daemon = Daemon::start();
    let pid = daemon.child.id();
    cgroup.enter(pid);
    let api = Api::of(&daemon);

    daemon.berth_ok(&["box", "create", "a"]);
    daemon.berth_ok(&[
        "exec",
        "a",
        "--",
        "sh",
        "-c",
        "mkfifo ~/fifo; ln -s /dev/zero ~/zero; echo hi > ~/small",
    ]);
    // Warm the paths every case takes once (file read, upload, exec stream), then rest.
    assert_eq!(api.get_file("/home/user/small").body_prefix, b"hi\n");
    let resting = vm_kib(pid, "VmRSS") * 1024;
    eprintln!("daemon resting RSS: {} MiB", resting / MIB);

    let measure = |case: &str, attack: &dyn Fn()| {
        reset_peak_rss(pid);
        attack();
        assert!(
            daemon_alive(pid),
            "{case}: the daemon died:\n{}",
            daemon.logs()
        );
        let peak = vm_kib(pid, "VmHWM") * 1024;
        let now = vm_kib(pid, "VmRSS") * 1024;
        eprintln!(
            "{case}: peak RSS {} MiB, after {} MiB (resting {} MiB)",
            peak / MIB,
            now / MIB,
            resting / MIB
        );
        assert!(
            peak <= resting + RSS_GROWTH_BOUND,
            "{case}: the daemon's RSS peaked at {} MiB, over {} MiB + {} MiB",
            peak / MIB,
            resting / MIB,
            RSS_GROWTH_BOUND / MIB
        );
    };

    for (case, path) in [
        ("/dev/zero", "/dev/zero"),
        ("a FIFO", "/home/user/fifo"),
        ("a symlink to /dev/zero", "/home/user/zero"),
    ] {
        measure(case, &|| {
            let answer = api.get_file(path);
            assert_eq!(answer.status, 400, "{case}: {answer:?}");
            let text = String::from_utf8_lossy(&answer.body_prefix);
            assert!(text.contains("not_a_regular_file"), "{case}: {text}");
        });
    }

    measure("a file that keeps growing", &|| {
        let writer = api.exec_stream(
            "while :; do head -c 1048576 /dev/zero; sleep 0.02; done > /home/user/grow",
        );
        let deadline = Instant::now() + Duration::from_secs(120);
        while api.stat_size("/home/user/grow") < 8 * MIB {
            assert!(
                Instant::now() < deadline,
                "the writer did not write 8 MiB in 120 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let answer = api.get_file("/home/user/grow");
        drop(writer);
        assert_eq!(answer.status, 200, "{answer:?}");
        let announced = answer
            .header("content-length")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no Content-Length announced: {answer:?}"));
        assert!(announced >= 8 * MIB, "{announced}");
        assert_eq!(answer.body_len, announced, "the body is the size at open");
    });

    measure("concurrent large uploads", &|| {
        let statuses = api.concurrent_uploads(UPLOADS, UPLOAD_BYTES);
        eprintln!("upload answers: {statuses:?}");
        assert!(
            statuses.iter().all(|(s, _)| [204, 429].contains(s)),
            "{statuses:?}"
        );
        assert!(
            statuses.iter().any(|(s, _)| *s == 204),
            "none was accepted: {statuses:?}"
        );
        assert!(
            statuses.iter().any(|(s, _)| *s == 429),
            "all {UPLOADS} were accepted at once: {statuses:?}"
        );
        for (status, retry_after) in &statuses {
            if *status == 429 {
                assert!(retry_after.is_some(), "a 429 without Retry-After");
            }
        }
    });

    measure("a large archive in and out", &|| {
        let answer = api.put_archive("/home/user/tarred", ARCHIVE_FILE_BYTES);
        assert_eq!(answer.status, 200, "{answer:?}");
        let written: serde_json::Value = serde_json::from_slice(&answer.body_prefix).unwrap();
        assert_eq!(written["bytes"], ARCHIVE_FILE_BYTES, "{written}");
        let answer = api.get("/v1/boxes/a/files/archive?path=/home/user/tarred");
        assert_eq!(answer.status, 200, "{answer:?}");
        assert!(answer.body_len > ARCHIVE_FILE_BYTES, "{answer:?}");
    });
    // 1 GiB through `berth exec`'s stdin: streamed to the box as it reads, so the daemon
    // holds a few chunks at a time (issue 12: growth under 64 MiB).
    reset_peak_rss(pid);
    let mut exec = common::berth()
        .arg("--data-dir")
        .arg(daemon.dir())
        .args(["exec", "a", "--timeout", "600", "--", "sh", "-c", "wc -c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut feed = exec.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![7u8; MIB as usize];
        for _ in 0..1024 {
            feed.write_all(&chunk).unwrap();
        }
    });
    let out = exec.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(
        out.status.success(),
        "exec with 1 GiB of stdin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (1024 * MIB).to_string()
    );
    let peak = vm_kib(pid, "VmHWM") * 1024;
    eprintln!(
        "1 GiB through exec stdin: peak RSS {} MiB (resting {} MiB)",
        peak / MIB,
        resting / MIB
    );
    assert!(
        peak <= resting + 64 * MIB,
        "1 GiB through exec stdin: the daemon's RSS peaked at {} MiB, over {} MiB + 64 MiB",
        peak / MIB,
        resting / MIB
    );

    // The daemon goes on serving: a second box, and the first one, still run commands.
    daemon.berth_ok(&["box", "create", "b"]);
    assert_eq!(daemon.berth_ok(&["exec", "b", "--", "echo", "ok"]), "ok\n");
    assert_eq!(
        daemon.berth_ok(&["exec", "a", "--", "cat", "small"]),
        "hi\n"
    );
    assert!(daemon_alive(pid));
}

// ---------------------------------------------------------------------------------------
// The memory cgroup.

/// A memory cgroup (v1 or v2) that is removed on drop, even after a panic.
struct MemoryCgroup {
    dir: PathBuf,
    /// Where a process goes back to before the directory can be removed.
    parent_procs: PathBuf,
}

impl MemoryCgroup {
    fn create(limit: u64) -> Result<MemoryCgroup, String> {
        let name = format!("berth-bounded-memory-{}", std::process::id());
        let (root, limit_file) = if PathBuf::from("/sys/fs/cgroup/cgroup.controllers").exists() {
            (PathBuf::from("/sys/fs/cgroup"), "memory.max")
        } else {
            (
                PathBuf::from("/sys/fs/cgroup/memory"),
                "memory.limit_in_bytes",
            )
        };
        let dir = root.join(&name);
        fs::create_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let cgroup = MemoryCgroup {
            dir,
            parent_procs: root.join("cgroup.procs"),
        };
        fs::write(cgroup.dir.join(limit_file), limit.to_string())
            .map_err(|e| format!("cannot set {limit_file}: {e}"))?;
        Ok(cgroup)
    }

    fn enter(&self, pid: u32) {
        fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let procs = fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = fs::write(&self.parent_procs, pid);
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            eprintln!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

fn daemon_alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        !s.lines()
            .any(|l| l.starts_with("State:") && l.contains('Z'))
    })
}

// ---------------------------------------------------------------------------------------
// Plain HTTP/1.1 to the daemon, reading every body with a bound.

struct Api {
    addr: String,
    key: String,
}

/// What was answered: the status, the headers, the body's length and its first bytes.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body_len: u64,
    body_prefix: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// The most of a body the test reads: more means the daemon sent a body it should not have.
const READ_CAP: u64 = 512 * MIB;

impl Api {
    fn of(daemon: &Daemon) -> Api {
        let (addr, key) = daemon.api_endpoint();
        Api { addr, key }
    }

    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .unwrap();
        stream
    }

    fn head(&self, method: &str, path: &str, extra: &str) -> String {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n{extra}\r\n",
            self.addr, self.key
        )
    }

    fn get_file(&self, path: &str) -> Answer {
        self.get(&format!("/v1/boxes/a/files?path={path}"))
    }

    fn get(&self, target: &str) -> Answer {
        let mut stream = self.connect();
        stream
            .write_all(self.head("GET", target, "").as_bytes())
            .unwrap();
        read_answer(&mut BufReader::new(stream))
    }

    /// A tar of one file of `bytes` zeros, streamed into directory `path` of box `a`.
    fn put_archive(&self, path: &str, bytes: u64) -> Answer {
        let mut header = [0u8; 512];
        header[..3].copy_from_slice(b"big");
        header[100..107].copy_from_slice(b"0000644");
        header[108..115].copy_from_slice(b"0000000");
        header[116..123].copy_from_slice(b"0000000");
        header[124..135].copy_from_slice(format!("{bytes:011o}").as_bytes());
        header[136..147].copy_from_slice(b"00000000000");
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        header[148..156].copy_from_slice(b"        ");
        let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
        header[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        let padded = bytes.next_multiple_of(512);
        let total = 512 + padded + 1024;
        let extra = format!("Content-Type: application/x-tar\r\nContent-Length: {total}\r\n");
        let mut stream = self.connect();
        let target = format!("/v1/boxes/a/files/archive?path={path}");
        stream
            .write_all(self.head("PUT", &target, &extra).as_bytes())
            .unwrap();
        stream.write_all(&header).unwrap();
        let chunk = vec![0u8; MIB as usize];
        let mut left = padded + 1024;
        while left > 0 {
            let n = left.min(MIB);
            stream.write_all(&chunk[..n as usize]).unwrap();
            left -= n;
        }
        read_answer(&mut BufReader::new(stream))
    }

    fn stat_size(&self, path: &str) -> u64 {
        let mut stream = self.connect();
        let target = format!("/v1/boxes/a/files/stat?path={path}");
        stream
            .write_all(self.head("GET", &target, "").as_bytes())
            .unwrap();
        let answer = read_answer(&mut BufReader::new(stream));
        if answer.status != 200 {
            return 0;
        }
        let entry: serde_json::Value = serde_json::from_slice(&answer.body_prefix).unwrap();
        entry["size"].as_u64().unwrap()
    }

    /// Starts `script` in box `a` as a streamed exec; it runs until the stream is dropped.
    fn exec_stream(&self, script: &str) -> BufReader<TcpStream> {
        let body = serde_json::json!({"cmd": ["sh", "-c", script], "timeout_s": 600}).to_string();
        let extra = format!(
            "Accept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        );
        let mut stream = self.connect();
        stream
            .write_all(
                format!("{}{body}", self.head("POST", "/v1/boxes/a/exec", &extra)).as_bytes(),
            )
            .unwrap();
        let mut reader = BufReader::new(stream);
        let (status, _) = read_head(&mut reader);
        assert_eq!(status, 200, "the writer did not start");
        reader
    }

    /// `count` uploads of `bytes` each, all asked for before any body is sent
    /// (`Expect: 100-continue`); then each accepted one sends its body. Returns each
    /// answer's status and Retry-After.
    fn concurrent_uploads(&self, count: usize, bytes: u64) -> Vec<(u16, Option<String>)> {
        let barrier = std::sync::Barrier::new(count);
        std::thread::scope(|scope| {
            let uploads: Vec<_> = (0..count)
                .map(|i| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        let extra = format!(
                            "Content-Type: application/octet-stream\r\nContent-Length: {bytes}\r\nExpect: 100-continue\r\n"
                        );
                        let target = format!("/v1/boxes/a/files?path=/home/user/upload-{i}");
                        let mut stream = self.connect();
                        stream.write_all(self.head("PUT", &target, &extra).as_bytes()).unwrap();
                        let mut reader = BufReader::new(stream);
                        let (status, headers) = read_head(&mut reader);
                        barrier.wait();
                        if status != 100 {
                            let answer = read_rest(&mut reader, status, headers);
                            return (answer.status, answer.header("retry-after").map(str::to_owned));
                        }
                        let chunk = vec![0u8; MIB as usize];
                        let mut left = bytes;
                        while left > 0 {
                            let n = left.min(MIB);
                            reader.get_mut().write_all(&chunk[..n as usize]).unwrap();
                            left -= n;
                        }
                        let answer = read_answer(&mut reader);
                        (answer.status, answer.header("retry-after").map(str::to_owned))
                    })
                })
                .collect();
            uploads.into_iter().map(|u| u.join().unwrap()).collect()
        })
    }
}

fn read_head(reader: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            return (status, headers);
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
}

fn read_answer(reader: &mut BufReader<TcpStream>) -> Answer {
    let (status, headers) = read_head(reader);
    read_rest(reader, status, headers)
}

/// The body up to the connection's close (`Connection: close`), counting at most
/// [`READ_CAP`] bytes and keeping the first 64 KiB. A chunked body is counted with its
/// framing; only a `Content-Length` body is compared by length.
fn read_rest(
    reader: &mut BufReader<TcpStream>,
    status: u16,
    headers: Vec<(String, String)>,
) -> Answer {
    let mut body_len = 0u64;
    let mut body_prefix = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    while body_len < READ_CAP {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let keep = (64 * 1024usize).saturating_sub(body_prefix.len()).min(n);
                body_prefix.extend_from_slice(&buf[..keep]);
                body_len += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("reading a body after {body_len} bytes (status {status}): {e}"),
        }
    }
    Answer {
        status,
        headers,
        body_len,
        body_prefix,
    }
}
