//! E2B's official npm SDK (`e2b`, pinned and unmodified) drives a real `berth up` (sandbox
//! runtime), pointed at berth by the three variables of docs/e2b.md: the scripts in
//! `e2b_sdk/*.mjs` are the JavaScript twins of the Python suites in `e2b_sdk.rs`. Each prints
//! one `ok <check>` line per check; each test asserts every one, in order.

mod common;

use common::e2b::{npm_module, run_node, run_node_with};
use common::Daemon;

/// The sandboxes' domain: a name that no DNS answers, reached by sending to the daemon.
const DOMAIN: &str = "boxes.test";

/// Every check `lifecycle.mjs` makes, in order.
const LIFECYCLE_CHECKS: &[&str] = &[
    "js create",
    "js getInfo",
    "js list by metadata",
    "js setTimeout",
    "js getHost and the traffic token",
    "js pause and connect keep processes",
    "js killed at timeout",
    "js kill",
    "done",
];

#[test]
fn the_unmodified_npm_sdk_runs_a_sandbox_lifecycle_on_berth() {
    let Some(module) = npm_module() else {
        return;
    };
    // For `getHost`: the SDK names a port `<port>-<sandboxID>.<E2B_DOMAIN>`, which berth
    // serves under its `[ports] base_domain`.
    let daemon = Daemon::start_with_config(&format!("[ports]\nbase_domain = \"{DOMAIN}\"\n"));
    let domain = [("E2B_DOMAIN", DOMAIN)];
    run_node_with(&daemon, &module, "lifecycle.mjs", LIFECYCLE_CHECKS, &domain);
}

/// Every check of `commands.mjs`, in order.
const COMMANDS_CHECKS: &[&str] = &[
    "js run",
    "js non-zero exit throws CommandExitError",
    "js onStdout and onStderr",
    "js envs",
    "js cwd",
    "js user",
    "js background wait",
    "js stdin",
    "js list",
    "js kill",
    "js connect",
    "done",
];

#[test]
fn the_unmodified_npm_sdk_runs_commands_on_berth() {
    let Some(module) = npm_module() else {
        return;
    };
    let daemon = Daemon::start();
    run_node(&daemon, &module, "commands.mjs", COMMANDS_CHECKS);
}

/// Every check of `files.mjs`, in order.
const FILES_CHECKS: &[&str] = &[
    "js write a string, ArrayBuffer, Blob, stream, gzip and several files",
    "js read text, bytes, blob, stream and gzip",
    "js list with depth",
    "js exists and getInfo",
    "js makeDir, rename and remove",
    "js watchDir",
    "js signed urls with fetch, an expired and a forged one refused",
    "done",
];

#[test]
fn the_unmodified_npm_sdk_reads_and_writes_a_sandboxs_files() {
    let Some(module) = npm_module() else {
        return;
    };
    let daemon = Daemon::start();
    run_node(&daemon, &module, "files.mjs", FILES_CHECKS);
}

/// Every check of `pty.mjs`, in order.
const PTY_CHECKS: &[&str] = &[
    "js pty create with onData and sendInput",
    "js pty listed",
    "js pty resize",
    "js pty connect",
    "js pty kill",
    "js pty exit code",
    "done",
];

#[test]
fn the_unmodified_npm_sdk_drives_ptys_on_berth() {
    let Some(module) = npm_module() else {
        return;
    };
    let daemon = Daemon::start();
    run_node(&daemon, &module, "pty.mjs", PTY_CHECKS);
}
