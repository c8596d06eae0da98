use std::time::Instant;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use berth_confine::SYSTEM_DIRS;

use super::*;
use crate::tool::E2FSCK;

fn skip() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        berth_testkit::skip("root", "confining a tool needs root");
        return true;
    }
    if E2FSCK.locate().is_err() {
        berth_testkit::skip("e2fsprogs", "e2fsck is not installed");
        return true;
    }
    false
}

/// A FIFO as the "image": e2fsck blocks opening it until someone writes.
fn stalling_image(dir: &Path) -> PathBuf {
    let fifo = dir.join("stall");
    let c = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    fifo
}

/// The confined child of this process running `comm` with `arg` on its command line
/// (tests of this crate run concurrently in one process under `cargo test`, each with
/// confined children of its own: the name alone could find another test's), once it is
/// there; looked for at least once.
fn wait_for_child(comm: &str, arg: &str, within: Duration) -> Option<u32> {
    let started = Instant::now();
    loop {
        if let Some(pid) = child_running(comm, arg) {
            return Some(pid);
        }
        if started.elapsed() >= within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn child_running(comm: &str, arg: &str) -> Option<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .find_map(|entry| {
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // pid (comm) state ppid ...
            let (head, rest) = stat.rsplit_once(") ")?;
            let ppid = rest.split(' ').nth(1)?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let has_arg = cmdline
                .split(|&b| b == 0)
                .any(|a| String::from_utf8_lossy(a).contains(arg));
            (head.ends_with(&format!("({comm}")) && ppid == me && has_arg)
                .then(|| entry.file_name().to_str()?.parse().ok())
                .flatten()
        })
}

fn status_field(status: &str, key: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .unwrap_or_else(|| panic!("no {key} in {status}"))
        .trim()
        .to_string()
}

/// The confined e2fsck has no capability at all, not even in its bounding set, runs as
/// the tool uid with no_new_privs and a seccomp filter, in a mount namespace whose root
/// holds only /usr, the merged-usr links and its one file.
#[test]
fn a_confined_tool_has_no_capabilities_seccomp_and_only_its_file() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = stalling_image(dir.path());
    let fifo_c = fifo.clone();
    let runner = std::thread::spawn(move || {
        run(
            E2FSCK,
            &[OsStr::new("-n"), &inside("caps.ext4")],
            &[Bind::read_only(&fifo_c, "caps.ext4")],
            Limits {
                memory_bytes: 256 << 20,
                deadline: Duration::from_secs(120),
            },
        )
    });
    let pid =
        wait_for_child("e2fsck", "caps.ext4", Duration::from_secs(60)).expect("e2fsck started");
    // Wait until it blocks in the FIFO's open (it has exec'd and is in its jail).
    let started = Instant::now();
    let status = loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        if status_field(&status, "Seccomp") == "2" || started.elapsed() > Duration::from_secs(30) {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let root: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/root"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    let ns = |p: &str| std::fs::read_link(format!("/proc/{p}/ns/mnt")).unwrap();
    let own_ns = ns("self");
    let child_ns = ns(&pid.to_string());
    // Unblock it: a writer that closes at once gives e2fsck an empty "device".
    drop(std::fs::OpenOptions::new().write(true).open(&fifo).unwrap());
    let out = runner.join().unwrap().unwrap();

    assert_eq!(status_field(&status, "CapEff"), "0000000000000000");
    assert_eq!(status_field(&status, "CapPrm"), "0000000000000000");
    assert_eq!(status_field(&status, "CapBnd"), "0000000000000000");
    assert_eq!(status_field(&status, "CapAmb"), "0000000000000000");
    assert_eq!(status_field(&status, "Seccomp"), "2");
    assert_eq!(status_field(&status, "NoNewPrivs"), "1");
    let uid = status_field(&status, "Uid");
    assert!(
        uid.split_whitespace().all(|u| u == TOOL_UID.to_string()),
        "{uid}"
    );
    assert_eq!(status_field(&status, "Groups"), "");
    assert_ne!(own_ns, child_ns, "its own mount namespace");
    // A superblock can make e2fsck size its tables past any sense: the address-space
    // limit fails its allocation, not the host; CPU time is bounded too.
    let limit = |name: &str| {
        let line = limits.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(limit("Max address space"), (256u64 << 20).to_string());
    assert_eq!(limit("Max cpu time"), "121");
    assert_eq!(limit("Max core file size"), "0");
    let mut root = root;
    root.sort();
    let mut expected: Vec<String> = ["dev", "etc", "usr", "caps.ext4"]
        .map(String::from)
        .to_vec();
    for name in SYSTEM_DIRS {
        if Path::new("/").join(name).exists() {
            expected.push(name.to_string());
        }
    }
    expected.sort();
    assert_eq!(root, expected);
    assert!(
        !out.status.success(),
        "an empty device is no file system: {out:?}"
    );
    // The FIFO is given back to its owner.
    assert_eq!(std::fs::metadata(&fifo).unwrap().uid(), 0);
}

/// A tool that stalls is killed at its deadline, and the caller hears why.
#[test]
fn a_stalled_tool_is_killed_at_its_deadline() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let fifo = stalling_image(dir.path());
    let started = Instant::now();
    let err = run(
        E2FSCK,
        &[OsStr::new("-n"), &inside("stalled.ext4")],
        &[Bind::read_only(&fifo, "stalled.ext4")],
        Limits {
            memory_bytes: 256 << 20,
            deadline: Duration::from_secs(2),
        },
    )
    .unwrap_err();
    assert!(matches!(err, ImageError::TookTooLong { .. }), "{err}");
    assert!(err.to_string().contains("took too long"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        wait_for_child("e2fsck", "stalled.ext4", Duration::ZERO).is_none(),
        "no e2fsck is left"
    );
}

/// Inside, what a hostile image could make a tool attempt fails: sockets, new
/// processes, writing its read-only file, writing anywhere else, regaining root;
/// reading the file it was given works. (perl from /usr plays the subverted tool.)
#[test]
fn a_subverted_tool_can_only_read_its_file() {
    const PERL: Tool = Tool {
        name: "perl",
        package: "perl-base",
    };
    if skip() {
        return;
    }
    if !PERL.locate().is_ok_and(|p| p.starts_with("/usr")) {
        berth_testkit::skip("perl", "no perl under /usr plays the subverted tool");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data");
    std::fs::write(&file, "the image\n").unwrap();
    let rw = dir.path().join("rw");
    std::fs::write(&rw, "").unwrap();
    let script = r#"
use Socket; use POSIX ();
sub attempt { my ($n, $f) = @_; if ($f->()) { print "$n ALLOWED\n" } else { print "$n refused\n" } }
attempt("inet", sub { socket(my $s, PF_INET, SOCK_STREAM, 0) });
attempt("unix", sub { socket(my $s, PF_UNIX, SOCK_STREAM, 0) });
attempt("fork", sub { my $p = fork(); POSIX::_exit(0) if defined $p && $p == 0; defined $p });
attempt("write-given", sub { open(my $f, ">>", "/data") });
attempt("write-root", sub { open(my $f, ">", "/planted") });
attempt("setuid", sub { defined POSIX::setuid(0) });
attempt("chmod", sub { chmod(0666, "/rw") });
open(my $f, "<", "/data") or die; print "read ", scalar(<$f>);
"#;
    let out = run(
        PERL,
        &[OsStr::new("-e"), OsStr::new(script)],
        &[Bind::read_only(&file, "data"), Bind::writable(&rw, "rw")],
        Limits {
            memory_bytes: 512 << 20,
            deadline: Duration::from_secs(60),
        },
    )
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    for name in [
        "inet",
        "unix",
        "fork",
        "write-given",
        "write-root",
        "setuid",
        "chmod",
    ] {
        assert!(
            out.stdout.contains(&format!("{name} refused")),
            "{name}: {}",
            out.stdout
        );
    }
    assert!(out.stdout.contains("read the image"), "{}", out.stdout);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "the image\n");
    let rw = std::fs::metadata(&rw).unwrap();
    assert_eq!(
        (rw.uid(), rw.mode() & 0o777),
        (0, 0o644),
        "given back as it was"
    );
}
