//! `berth cp -r` with a real daemon and real boxes (sandbox, and qemu where the host runs
//! it): a tree of 10,000 files with relative symlinks and varied modes goes into a box and
//! back out identical (path, type, mode, size, sha256 or link target), and the box itself
//! holds exactly that tree; and a watch over the daemon's API sees the files an exec
//! creates, changes and deletes; tars that reach outside their target are refused and
//! nothing lands outside.
//!
//! Needs root, runc and berth-init (and for qemu, QEMU and the test images); otherwise
//! skips (`berth_testkit::skip`).

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, ErrorKind, Write as _};
use std::net::TcpStream;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use sha2::{Digest, Sha256};

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;
const MODES: [u32; 6] = [0o644, 0o600, 0o755, 0o640, 0o700, 0o444];

/// 100 directories of 100 files (10,000), each directory with two relative symlinks (one to
/// a file beside it, one to a file in another directory), an empty directory and one whose
/// mode leaves out the group and others.
fn make_tree(root: &Path) {
    for d in 0..DIRS {
        let dir = root.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            let i = d * FILES_PER_DIR + f;
            let path = dir.join(format!("f{f:03}"));
            // Mostly small files, a few of 100 KiB: varied content for the checksums.
            let len = if i.is_multiple_of(997) {
                100 * 1024
            } else {
                i % 300
            };
            let data: Vec<u8> = (0..len).map(|k| ((k * 31 + i) % 251) as u8).collect();
            fs::write(&path, data).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(MODES[i % MODES.len()])).unwrap();
        }
        symlink("f000", dir.join("near")).unwrap();
        symlink(format!("../d{:03}/f001", (d + 1) % DIRS), dir.join("far")).unwrap();
    }
    fs::create_dir(root.join("empty")).unwrap();
    fs::set_permissions(root.join("d007"), fs::Permissions::from_mode(0o700)).unwrap();
}

/// Relative path → (type, mode, size, sha256 or link target).
fn manifest(root: &Path) -> BTreeMap<String, (char, u32, u64, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for item in fs::read_dir(&dir).unwrap() {
            let path = item.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let mode = meta.mode() & 0o7777;
            let row = if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap();
                ('l', 0, 0, target.to_string_lossy().into_owned())
            } else if meta.is_dir() {
                stack.push(path.clone());
                ('d', mode, 0, String::new())
            } else {
                let sum = Sha256::digest(fs::read(&path).unwrap());
                let hex = sum.iter().fold(String::new(), |mut s, b| {
                    let _ = write!(s, "{b:02x}");
                    s
                });
                ('f', mode, meta.len(), hex)
            };
            out.insert(rel, row);
        }
    }
    out
}

/// The same manifest as the box's `find` and `sha256sum` print it, one line per entry.
fn listing(manifest: &BTreeMap<String, (char, u32, u64, String)>) -> String {
    let mut out = String::new();
    for (path, (kind, mode, size, what)) in manifest {
        match kind {
            'f' => writeln!(out, "f {path} {mode:o} {size}\nh {path} {what}").unwrap(),
            'd' => writeln!(out, "d {path} {mode:o}").unwrap(),
            _ => writeln!(out, "l {path} {what}").unwrap(),
        }
    }
    out
}

/// In the box: every entry under `$1` in [`listing`]'s form, one kind of entry per
/// command (a mismatch then shows which part differs). BusyBox's `find`, `stat` and
/// `sha256sum` suffice (the `minimal` VM image has no others), with few processes: an
/// emulated VM spends seconds on each thousand.
const BOX_LISTINGS: [&str; 4] = [
    r#"cd "$1" && find . ! -path . -type d -exec stat -c 'd %n %a' {} + | sed 's|^d \./|d |'"#,
    r#"cd "$1" && find . -type l -exec sh -c 'for p; do echo "l ${p#./} $(readlink "$p")"; done' sh {} +"#,
    r#"cd "$1" && find . -type f -exec stat -c 'f %n %a %s' {} + | sed 's|^f \./|f |'"#,
    r#"cd "$1" && find . -type f -exec sha256sum {} + | sed 's|^\([0-9a-f]*\)  \./\(.*\)$|h \2 \1|'"#,
];

/// Into box `name` and back out; the box's own view and the copy back both match.
fn round_trip(daemon: &Daemon, name: &str) {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("tree");
    make_tree(&src);
    let expected = manifest(&src);
    assert_eq!(
        expected.values().filter(|r| r.0 == 'f').count(),
        DIRS * FILES_PER_DIR
    );

    let up = daemon.berth(&["cp", "-r", src.to_str().unwrap(), &format!("{name}:data")]);
    assert!(up.status.success(), "{}", stderr(&up));
    let summary = stderr(&up);
    assert!(
        summary.contains("copied 10000 files") && summary.contains("200 links"),
        "{summary}"
    );

    let want = listing(&expected);
    let mut in_box = String::new();
    for script in BOX_LISTINGS {
        in_box += &daemon.berth_ok(&[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            script,
            "sh",
            "/home/user/data",
        ]);
    }
    let got: std::collections::BTreeSet<&str> = in_box.lines().collect();
    let wanted: std::collections::BTreeSet<&str> = want.lines().collect();
    let only_here: Vec<_> = wanted.difference(&got).take(5).collect();
    let only_there: Vec<_> = got.difference(&wanted).take(5).collect();
    assert!(
        only_here.is_empty() && only_there.is_empty(),
        "the box's tree differs from the source: only in the source {only_here:?}, only in the box {only_there:?}"
    );

    let back = work.path().join("back");
    let down = daemon.berth(&["cp", "-r", &format!("{name}:data"), back.to_str().unwrap()]);
    assert!(down.status.success(), "{}", stderr(&down));
    let got = manifest(&back);
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(5)
        .collect();
    let differing: Vec<_> = expected
        .iter()
        .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && differing.is_empty() && got.len() == expected.len(),
        "missing {missing:?}, differing {differing:?}, {} vs {} entries",
        got.len(),
        expected.len()
    );
    // An existing local directory takes the box directory's name inside it.
    let into = work.path().join("into");
    fs::create_dir(&into).unwrap();
    daemon.berth_ok(&[
        "cp",
        "-r",
        &format!("{name}:data/d001"),
        into.to_str().unwrap(),
    ]);
    assert_eq!(manifest(&into.join("d001")).len(), FILES_PER_DIR + 2);

    // Clear one-line errors.
    let out = daemon.berth(&["cp", "-r", &format!("{name}:nope"), back.to_str().unwrap()]);
    assert_one_line_error(&out, 1, &["nope"]);
    let out = daemon.berth(&[
        "cp",
        "-r",
        work.path().join("absent").to_str().unwrap(),
        &format!("{name}:x"),
    ]);
    assert_one_line_error(&out, 1, &["absent"]);
}

/// A file and a directory land alike where local directories are missing: made on the
/// way, and into a directory when the target ends in '/'. A failure names the target the
/// user gave, never the temporary file beside it.
fn to_missing_directories(daemon: &Daemon, name: &str) {
    sh(
        daemon,
        name,
        "mkdir -p /home/user/m/sub && echo x > /home/user/m/sub/f.txt",
    );
    let work = tempfile::tempdir().unwrap();
    let at = |rel: &str| work.path().join(rel).to_str().unwrap().to_owned();
    daemon.berth_ok(&["cp", &format!("{name}:m/sub/f.txt"), &at("a/b/f.txt")]);
    daemon.berth_ok(&["cp", "-r", &format!("{name}:m"), &at("c/d/m")]);
    daemon.berth_ok(&["cp", &format!("{name}:m/sub/f.txt"), &at("e/")]);
    daemon.berth_ok(&["cp", "-r", &format!("{name}:m"), &at("g/")]);
    for landed in ["a/b/f.txt", "c/d/m/sub/f.txt", "e/f.txt", "g/m/sub/f.txt"] {
        let text = fs::read_to_string(work.path().join(landed));
        assert_eq!(text.ok().as_deref(), Some("x\n"), "{landed}");
    }
    let out = daemon.berth(&["cp", &format!("{name}:m/sub/f.txt"), &at("a/b/f.txt/under")]);
    assert_one_line_error(&out, 1, &["a/b/f.txt"]);
    assert!(!stderr(&out).contains("berth-partial"), "{}", stderr(&out));
}

/// `GET …/files/watch` on box `name`, read a line at a time from the raw (chunked)
/// answer: each event is one JSON line; chunk sizes and keepalives are skipped.
struct Watch {
    reader: BufReader<TcpStream>,
}

impl Watch {
    fn open(daemon: &Daemon, name: &str, path: &str) -> Watch {
        let (addr, key) = daemon.api_endpoint();
        let mut stream = TcpStream::connect(&addr).unwrap();
        write!(
            stream,
            "GET /v1/boxes/{name}/files/watch?path={path}&recursive=true HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\r\n",
            key
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let mut status = String::new();
        reader.read_line(&mut status).unwrap();
        assert!(status.contains(" 200 "), "{status}");
        Watch { reader }
    }

    /// Reads events until one equals `want`, failing at `deadline`.
    fn until(&mut self, want: &serde_json::Value, deadline: Instant) {
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {want} before the deadline; saw {seen:?}"
            );
            self.reader.get_ref().set_read_timeout(Some(left)).unwrap();
            let mut line = String::new();
            match self.reader.read_line(&mut line) {
                Ok(0) => panic!("the watch ended; saw {seen:?}"),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    continue
                }
                Err(e) => panic!("reading the watch: {e}"),
            }
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
                continue;
            };
            if !event.is_object() {
                continue;
            }
            if &event == want {
                return;
            }
            seen.push(event);
        }
    }
}

/// Runs a shell script in box `name` as the box user; its stdout.
fn sh(daemon: &Daemon, name: &str, script: &str) -> String {
    daemon.berth_ok(&["exec", name, "--", "sh", "-c", script])
}

/// `PUT …/files/archive` of `body` into `path` of box `name`: the status and the answer.
fn put_tar(daemon: &Daemon, name: &str, path: &str, body: &[u8]) -> (u16, String) {
    let (addr, key) = daemon.api_endpoint();
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(300)))
        .unwrap();
    write!(
        stream,
        "PUT /v1/boxes/{name}/files/archive?path={path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nContent-Type: application/x-tar\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    stream.write_all(body).unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut stream, &mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// Tars that reach outside their target are refused, naming the entry, and nothing lands
/// outside (the box's own `ls` says so).
fn attacks_are_refused(daemon: &Daemon, name: &str) {
    sh(daemon, name, "mkdir -p ~/outside ~/target && echo s > ~/outside/secret && ln -s ~/outside ~/target/planted");
    for (entry, body) in berth_testkit::raw_tar::attacks("/home/user/outside") {
        let (status, answer) = put_tar(daemon, name, "/home/user/target", &body);
        assert_eq!(status, 400, "{entry}: {answer}");
        assert!(
            answer.contains("invalid_request") && answer.contains(&entry),
            "{entry}: {answer}"
        );
    }
    let after = sh(daemon, name, "ls -A ~/outside; ls -A ~/target; test ! -e /etc/x && echo no-etc-x; stat -c %h ~/outside/secret");
    assert_eq!(after, "secret\nplanted\nno-etc-x\n1\n");
}

/// A watch sees what an exec does in the box.
fn watch_sees_an_exec(daemon: &Daemon, name: &str, within: Duration) {
    daemon.berth_ok(&["exec", name, "--", "mkdir", "-p", "/home/user/watched"]);
    let mut watch = Watch::open(daemon, name, "/home/user/watched");
    sh(
        daemon,
        name,
        "cd ~/watched && echo a > f && echo b >> f && rm f",
    );
    let deadline = Instant::now() + within;
    for want in [
        serde_json::json!({"type":"create","path":"f","dir":false}),
        serde_json::json!({"type":"modify","path":"f","dir":false}),
        serde_json::json!({"type":"delete","path":"f","dir":false}),
    ] {
        watch.until(&want, deadline);
    }
}

#[test]
fn end_to_end_cp_r_round_trip_on_a_sandbox_box() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "dirs"]);
    round_trip(&daemon, "dirs");
    to_missing_directories(&daemon, "dirs");
    watch_sees_an_exec(&daemon, "dirs", Duration::from_secs(30));
    attacks_are_refused(&daemon, "dirs");
    daemon.berth_ok(&["box", "rm", "dirs"]);
}

#[test]
fn end_to_end_cp_r_round_trip_on_a_qemu_box() {
    let Some(daemon) = Daemon::start_with_qemu_box("vmdirs") else {
        return;
    };
    round_trip(&daemon, "vmdirs");
    // An emulated (TCG) guest is many times slower than a sandbox.
    watch_sees_an_exec(&daemon, "vmdirs", Duration::from_secs(180));
    attacks_are_refused(&daemon, "vmdirs");
    daemon.berth_ok(&["box", "rm", "vmdirs"]);
    assert!(
        vm_processes(daemon.dir()).is_empty(),
        "a VM process outlived its box"
    );
}
