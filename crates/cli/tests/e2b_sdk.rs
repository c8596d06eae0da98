//! E2B's official Python SDK, pinned and unmodified, drives a real `berth up` (sandbox
//! runtime): `e2b_sdk/lifecycle.py` runs a sandbox's lifecycle with the sync `Sandbox` and
//! the async `AsyncSandbox` (create with metadata and envs, list filtered by metadata,
//! get_info, set_timeout, the kill at the timeout, pause and connect, the auto-pause at the
//! timeout, kill), pointed at berth by the three variables of docs/e2b.md. It prints one
//! `ok <check>` line per check; this test asserts every one, then looks at the berth box of
//! the sandbox the script leaves running.

mod common;

use common::e2b::{python, run_python, run_python_with};
use common::Daemon;

/// Every check the script makes, in order.
const CHECKS: &[&str] = &[
    "sync create",
    "sync get_info",
    "sync list by metadata",
    "sync set_timeout",
    "sync metrics",
    "sync pause",
    "sync connect resumes",
    "sync killed at timeout",
    "sync kill",
    "async create",
    "async get_info",
    "async list by metadata",
    "async set_timeout",
    "async pause and connect",
    "async auto-pause at timeout",
    "async killed at timeout",
    "async kill",
    "done",
];

#[test]
fn the_unmodified_python_sdk_runs_a_sandbox_lifecycle_on_berth() {
    let Some(python) = python() else {
        return;
    };
    let daemon = Daemon::start();
    let output = run_python(&daemon, &python, "lifecycle.py", CHECKS);

    // The sandbox the script left running is a berth box: named by its id, labelled, with
    // the SDK's envs as its environment.
    let kept = output
        .lines()
        .find_map(|l| l.strip_prefix("box kept "))
        .expect("the script names the sandbox it keeps");
    let shown: serde_json::Value =
        serde_json::from_str(&daemon.berth_ok(&["box", "show", kept])).unwrap();
    assert_eq!(shown["state"], "running", "{shown}");
    assert_eq!(shown["labels"]["e2b"], "true", "{shown}");
    assert_eq!(shown["env"]["GREETING"], "hello from e2b", "{shown}");
    let listed = daemon.berth_ok(&["box", "ls"]);
    assert!(listed.contains(kept), "{listed}");
    // The script killed every other sandbox it made, or their timeouts did.
    let others: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("box "))
        .filter_map(|l| l.split_once(' ').map(|(_, id)| id))
        .filter(|id| *id != kept)
        .collect();
    assert_eq!(others.len(), 2, "{output}");
    for id in others {
        assert!(!listed.contains(id), "{id} is still there:\n{listed}");
    }
}

/// Every check of `e2b_sdk/commands.py`, in order.
const COMMANDS_CHECKS: &[&str] = &[
    "sync run",
    "sync non-zero exit raises",
    "sync on_stdout",
    "sync envs",
    "sync cwd",
    "sync user",
    "sync background wait",
    "sync stdin",
    "sync list",
    "sync kill",
    "sync connect",
    "async run",
    "async non-zero exit raises",
    "async on_stdout",
    "async envs cwd user",
    "async stdin",
    "async list",
    "async kill",
    "async connect",
    "done",
];

#[test]
fn the_unmodified_python_sdk_runs_commands_on_berth() {
    let Some(python) = python() else {
        return;
    };
    let daemon = Daemon::start();
    run_python(&daemon, &python, "commands.py", COMMANDS_CHECKS);
}

/// Every check of `e2b_sdk/pty.py`, in order.
const PTY_CHECKS: &[&str] = &[
    "sync pty create and send_stdin",
    "sync pty listed",
    "sync pty resize",
    "sync pty connect",
    "sync pty kill",
    "sync pty exit code",
    "async pty create and on_data",
    "async pty resize",
    "async pty connect",
    "async pty kill",
    "done",
];

#[test]
fn the_unmodified_python_sdk_drives_ptys_on_berth() {
    let Some(python) = python() else {
        return;
    };
    let daemon = Daemon::start();
    run_python(&daemon, &python, "pty.py", PTY_CHECKS);
}

/// What `files.py` checks, in order.
const FILES_CHECKS: &[&str] = &[
    "sync write str, bytes, a list and a stream",
    "sync read text, bytes, stream and gzip",
    "sync list with depth",
    "sync exists and get_info",
    "sync make_dir, rename and remove",
    "sync watch_dir",
    "signed urls with httpx, an expired and a forged one refused",
    "async write and watch_dir",
    "async read, list, get_info, rename and remove",
];

#[test]
fn the_unmodified_python_sdk_reads_and_writes_a_sandboxs_files() {
    let Some(python) = python() else {
        return;
    };
    let daemon = Daemon::start();
    run_python(&daemon, &python, "files.py", FILES_CHECKS);
}

/// The same commands and files suites with the sandboxes on qemu (TCG here): the daemon's
/// images are built, then it is restarted with qemu as its default runtime, and the sandboxes
/// are made from berth's `debian` template (berth's default on a VM runtime, `minimal`, is
/// busybox, without the bash E2B's commands run in).
#[test]
fn the_unmodified_python_sdk_runs_commands_and_files_on_a_qemu_box() {
    let Some(python) = python() else {
        return;
    };
    let Some(mut daemon) = Daemon::start_offering_qemu() else {
        return;
    };
    // From the shared test image cache after the first build (debootstrap, minutes).
    daemon.berth_ok(&["image", "build", "--template", "debian"]);
    daemon.restart_with(&["--runtime", "qemu"]);
    let on_debian = [("BERTH_E2B_TEMPLATE", "debian")];
    run_python_with(&daemon, &python, "commands.py", COMMANDS_CHECKS, &on_debian);
    run_python_with(&daemon, &python, "files.py", FILES_CHECKS, &on_debian);
}
