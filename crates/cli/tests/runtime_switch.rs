//! One box, one volume, two runtimes: a `minimal` box made on the sandbox stops there and
//! starts on qemu (`berth box start NAME --runtime qemu`, i.e. `POST /v1/boxes/NAME/start`
//! with `{"runtime":"qemu"}`) with every file the user and box root wrote, owners and modes
//! intact, and back on the sandbox with what the VM wrote. The guard ends the daemon, then
//! kills whatever of the box it left (VM processes, containers) and unmounts what is still
//! mounted under the data dir (which frees the loop devices), also when the test panics.

mod common;

use std::fs;
use std::path::{Path, PathBuf};

use common::{e2e_skip_reason, processes_naming, vm_processes, Daemon};

/// Files written on the first runtime: by the user, by box root, in /home/user and /memory.
const WRITE_AS_USER: &str = "echo from-user > /home/user/u.txt && chmod 640 /home/user/u.txt \
     && mkdir -p /home/user/dir && chmod 750 /home/user/dir \
     && echo note > /memory/entities/user-note.md";
const WRITE_AS_ROOT: &str = "echo from-root > /home/user/r.txt && chmod 600 /home/user/r.txt \
     && echo root-memory > /memory/root.md && chown 0:0 /memory/root.md";
/// What must read the same on every runtime: owner, group, mode and content.
const SNAPSHOT: &str = "cd / && for f in /home/user/u.txt /home/user/r.txt /home/user/dir \
     /memory/entities/user-note.md /memory/root.md; do \
     stat -c '%n %u %g %a' $f; [ -f $f ] && cat $f; done";

/// The daemon, and after it ends whatever of its boxes it left: the VM processes of its data
/// dir, its containers, and every mount under its data dir.
struct Switch {
    daemon: Daemon,
    dir: PathBuf,
}

impl Drop for Switch {
    fn drop(&mut self) {
        self.daemon.terminate();
        for (pid, cmd) in processes_naming(&self.dir.to_string_lossy()) {
            if cmd.contains("qemu-system") || cmd.contains(" bridge --serial ") {
                eprintln!("guard: killing {pid} {cmd}");
                // SAFETY: kill(2) of a VM process of this test's data dir.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let root = self.dir.join("oci");
        if root.is_dir() {
            for args in [&["kill", "--all"][..], &["delete", "--force"][..]] {
                let listed = std::process::Command::new("runc")
                    .arg("--root")
                    .arg(&root)
                    .args(["list", "-q"])
                    .output();
                let ids = listed.map(|o| common::stdout(&o)).unwrap_or_default();
                for id in ids.lines() {
                    let mut cmd = std::process::Command::new("runc");
                    cmd.arg("--root").arg(&root).args(args);
                    if args[0] == "kill" {
                        cmd.arg(id).arg("KILL");
                    } else {
                        cmd.arg(id);
                    }
                    let _ = cmd.output();
                }
            }
        }
        for target in mounts_under(&self.dir) {
            eprintln!("guard: unmounting {}", target.display());
            let Ok(c) = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: umount2 reads the NUL-terminated path, which lives across the call.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
    }
}

#[test]
fn a_minimal_box_moves_from_the_sandbox_to_qemu_and_back_with_its_files() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let dir = fs::canonicalize(daemon.dir()).unwrap();
    let switch = Switch { daemon, dir };
    let d = &switch.daemon;
    if d.offer_qemu().is_none() {
        return;
    }
    d.berth_ok(&[
        "box",
        "create",
        "b1",
        "--runtime",
        "sandbox",
        "--template",
        "minimal",
    ]);
    d.berth_ok(&["exec", "b1", "--", "sh", "-c", WRITE_AS_USER]);
    d.berth_ok(&[
        "exec",
        "b1",
        "--user",
        "root",
        "--",
        "sh",
        "-c",
        WRITE_AS_ROOT,
    ]);
    let on_sandbox = d.berth_ok(&["exec", "b1", "--", "sh", "-c", SNAPSHOT]);
    let root_on_sandbox = d.berth_ok(&["exec", "b1", "--user", "root", "--", "sh", "-c", SNAPSHOT]);
    assert!(
        root_on_sandbox.contains("/home/user/r.txt 0 0 600\nfrom-root\n"),
        "{root_on_sandbox}"
    );
    assert!(
        on_sandbox.contains("/home/user/u.txt 1001 1001 640\nfrom-user\n")
            && on_sandbox.contains("/home/user/r.txt 0 0 600\n")
            && on_sandbox.contains("/memory/root.md 0 0 644\nroot-memory\n"),
        "{on_sandbox}"
    );
    // The user cannot read root's 0600 file: the owners are real on both runtimes.
    let denied = d.berth(&["exec", "b1", "--", "cat", "/home/user/r.txt"]);
    assert!(!denied.status.success(), "the user read root's file");
    // The sandbox runs the image, not the host's /usr: busybox is there.
    d.berth_ok(&["exec", "b1", "--", "ls", "/bin/busybox"]);
    let host_kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(
        d.berth_ok(&["exec", "b1", "--", "uname", "-r"]),
        host_kernel,
        "a container shares the host's kernel"
    );
    d.berth_ok(&["box", "stop", "b1"]);
    assert_eq!(mounts_under(&switch.dir), Vec::<PathBuf>::new());

    d.berth_ok(&["box", "start", "b1", "--runtime", "qemu"]);
    assert_eq!(shown(d, "b1")["runtime"], "qemu");
    assert_ne!(
        d.berth_ok(&["exec", "b1", "--", "uname", "-r"]),
        host_kernel,
        "not in a VM"
    );
    // Box root reads its files as its own (in the sandbox it was an idmapped host range).
    let root_sees = d.berth_ok(&["exec", "b1", "--user", "root", "--", "sh", "-c", SNAPSHOT]);
    assert_eq!(root_sees, root_on_sandbox, "as box root on qemu");
    let on_qemu = d.berth_ok(&["exec", "b1", "--", "sh", "-c", SNAPSHOT]);
    assert_eq!(on_qemu, on_sandbox, "as the user on qemu");
    d.berth_ok(&[
        "exec",
        "b1",
        "--",
        "sh",
        "-c",
        "echo from-vm > /home/user/v.txt && chmod 604 /home/user/v.txt",
    ]);
    d.berth_ok(&["box", "stop", "b1"]);
    assert!(vm_processes(&switch.dir).is_empty());

    d.berth_ok(&["box", "start", "b1", "--runtime", "sandbox"]);
    assert_eq!(shown(d, "b1")["runtime"], "sandbox");
    assert_eq!(
        d.berth_ok(&["exec", "b1", "--", "sh", "-c", SNAPSHOT]),
        on_sandbox,
        "back on the sandbox"
    );
    assert_eq!(
        d.berth_ok(&[
            "exec",
            "b1",
            "--",
            "stat",
            "-c",
            "%u %g %a",
            "/home/user/v.txt"
        ]),
        "1001 1001 604\n"
    );
    d.berth_ok(&["box", "stop", "b1"]);
    assert_eq!(mounts_under(&switch.dir), Vec::<PathBuf>::new());
    assert!(d.running_containers().is_empty());
}

fn shown(d: &Daemon, name: &str) -> serde_json::Value {
    serde_json::from_str(&d.berth_ok(&["box", "show", name])).unwrap()
}

/// Mount points under `dir` in this mount namespace (the daemon's are the same: it runs
/// in ours).
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mut found: Vec<PathBuf> = table
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(PathBuf::from)
        .filter(|p| p.starts_with(dir))
        .collect();
    // Deepest first, for unmounting.
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}
