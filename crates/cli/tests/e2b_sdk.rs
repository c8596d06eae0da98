//! E2B's official Python SDK, pinned and unmodified, drives a real `berth up` (sandbox
//! runtime, and qemu), pointed at berth by the three variables of docs/e2b.md, with the sync
//! `Sandbox` and the async `AsyncSandbox`: `e2b_sdk/lifecycle.py` (create with metadata and
//! envs, list filtered by metadata, get_info, set_timeout, get_host, the kill at the timeout,
//! pause and connect keeping processes, the auto-pause at the timeout, kill), `commands.py`,
//! `pty.py` and `files.py`. Each prints one `ok <check>` line per check; a test asserts every
//! one. The npm SDK's suites are `e2b_npm.rs`.

mod common;

use std::fs;
use std::path::Path;

use common::e2b::{desktop_python, python, run_python, run_python_with};
use common::{link_test_image_cache, stderr, Daemon};

/// The `[ports] base_domain` of the lifecycle's daemon.
const DOMAIN: &str = "boxes.test";

/// Every check the script makes, in order.
const CHECKS: &[&str] = &[
    "sync create",
    "sync get_info",
    "sync list by metadata",
    "sync set_timeout",
    "sync metrics",
    "sync get_host",
    "sync pause",
    "sync connect resumes",
    "sync connect keeps processes",
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

/// A daemon whose `[ports] base_domain` the lifecycle's `get_host` names (the SDK names a
/// port `<port>-<sandboxID>.<E2B_DOMAIN>`, which berth serves under that domain).
fn daemon_with_domain() -> Daemon {
    Daemon::start_with_config(&format!("[ports]\nbase_domain = \"{DOMAIN}\"\n"))
}

/// Runs `lifecycle.py` (with `env` added), then looks at the berth box of the sandbox it
/// left running: named by its id, labelled, with the SDK's envs as its environment; and the
/// other sandboxes it made are gone, killed by it or by their timeouts.
fn run_lifecycle(daemon: &Daemon, python: &std::path::Path, env: &[(&str, &str)]) {
    let mut env = env.to_vec();
    env.push(("E2B_DOMAIN", DOMAIN));
    let output = run_python_with(daemon, python, "lifecycle.py", CHECKS, &env);
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

#[test]
fn the_unmodified_python_sdk_runs_a_sandbox_lifecycle_on_berth() {
    let Some(python) = python() else {
        return;
    };
    run_lifecycle(&daemon_with_domain(), &python, &[]);
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
    "sync stream_input",
    "sync list",
    "sync kill",
    "sync connect",
    "async run",
    "async non-zero exit raises",
    "async on_stdout",
    "async envs cwd user",
    "async stdin",
    "async stream_input",
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

/// Every suite with the sandboxes on qemu (TCG here): the daemon's images are built, then it
/// is restarted with qemu as its default runtime, and the sandboxes are made from berth's
/// `debian` template (berth's default on a VM runtime, `minimal`, is busybox, without the
/// bash E2B's commands run in, or the python3 of the lifecycle's port app).
#[test]
fn the_unmodified_python_sdk_runs_every_suite_on_qemu_boxes() {
    let Some(python) = python() else {
        return;
    };
    let mut daemon = daemon_with_domain();
    if daemon.offer_qemu().is_none() {
        return;
    }
    // From the shared test image cache after the first build (debootstrap, minutes).
    daemon.berth_ok(&["image", "build", "--template", "debian"]);
    daemon.restart_with(&["--runtime", "qemu"]);
    let on_debian = [("BERTH_E2B_TEMPLATE", "debian")];
    run_python_with(&daemon, &python, "commands.py", COMMANDS_CHECKS, &on_debian);
    run_python_with(&daemon, &python, "files.py", FILES_CHECKS, &on_debian);
    run_python_with(&daemon, &python, "pty.py", PTY_CHECKS, &on_debian);
    run_lifecycle(&daemon, &python, &on_debian);
}

/// E2B's desktop SDK's own quickstart on a berth `desktop` box: create, screenshot, write,
/// press, left_click, and its stream URL (`e2b_sdk/desktop.py`). The desktop image is built
/// first (minutes, once per machine through the tests' image cache).
#[test]
fn the_unmodified_desktop_sdk_drives_a_berth_desktop() {
    let Some(python) = desktop_python() else {
        return;
    };
    let daemon = daemon_with_domain();
    link_test_image_cache(daemon.dir());
    let built = daemon.berth(&["image", "build", "--template", "desktop"]);
    if !built.status.success() {
        let err = stderr(&built);
        if err.contains("no network to the Debian mirror") {
            berth_testkit::skip("image-build", err.trim());
            return;
        }
        panic!("berth image build --template desktop failed: {err}");
    }
    let checks = [
        "create",
        "one desktop",
        "screenshot",
        "write and press",
        "left_click",
        "stream url",
        "done",
    ];
    // A wait that times out saves the screen there.
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("desktop");
    fs::create_dir_all(&shots).unwrap();
    run_python_with(
        &daemon,
        &python,
        "desktop.py",
        &checks,
        &[
            ("E2B_DOMAIN", DOMAIN),
            ("SHOTS_DIR", shots.to_str().unwrap()),
        ],
    );
}
