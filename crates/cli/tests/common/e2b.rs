//! Running E2B's official SDKs (pinned, unmodified) against a test daemon: each script in
//! `tests/e2b_sdk/` prints `ok <check>` per check that passed, pointed at berth by the three
//! variables of docs/e2b.md.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{e2e_skip_reason, run_logged, Daemon};

/// What one script may take on a loaded machine.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(600);

/// The pinned Python SDK's interpreter, or `None` (a skip, said and recorded) where this
/// machine cannot run the SDK's tests.
pub fn python() -> Option<PathBuf> {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", reason);
        return None;
    }
    match berth_testkit::e2b_sdk::find() {
        Ok(python) => Some(python),
        Err(reason) => {
            berth_testkit::skip("e2b-sdk", reason);
            None
        }
    }
}

/// The Python with the pinned desktop SDK, or `None` (a skip, said and recorded) where this
/// machine cannot run it.
pub fn desktop_python() -> Option<PathBuf> {
    python()?;
    match berth_testkit::e2b_sdk::find_desktop() {
        Ok(python) => Some(python),
        Err(reason) => {
            berth_testkit::skip("e2b-sdk", reason);
            None
        }
    }
}

/// The pinned npm SDK's module, or `None` (a skip, said and recorded) where this machine
/// cannot run it.
pub fn npm_module() -> Option<PathBuf> {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", reason);
        return None;
    }
    match berth_testkit::e2b_sdk::find_npm() {
        Ok(module) => Some(module),
        Err(reason) => {
            berth_testkit::skip("e2b-npm", reason);
            None
        }
    }
}

/// Runs `tests/e2b_sdk/<script>` with the pinned Python SDK against `daemon` and asserts
/// that it printed `ok <check>` for exactly `checks`, in order. Answers the script's output.
pub fn run_python(daemon: &Daemon, python: &Path, script: &str, checks: &[&str]) -> String {
    run_python_with(daemon, python, script, checks, &[])
}

/// [`run_python`] with `env` added to the script's environment.
pub fn run_python_with(
    daemon: &Daemon,
    python: &Path,
    script: &str,
    checks: &[&str],
    env: &[(&str, &str)],
) -> String {
    let mut vars: Vec<(&str, &OsStr)> = vec![
        ("PYTHONUNBUFFERED", OsStr::new("1")),
        // A crash of the SDK (or its native parts) prints where it was.
        ("PYTHONFAULTHANDLER", OsStr::new("1")),
    ];
    vars.extend(env.iter().map(|(name, value)| (*name, OsStr::new(*value))));
    run_script(daemon, python.as_os_str(), script, checks, &vars)
}

/// Runs `tests/e2b_sdk/<script>` (an ES module) with node and the pinned npm SDK (`module`)
/// against `daemon`, as [`run_python`] does.
pub fn run_node(daemon: &Daemon, module: &Path, script: &str, checks: &[&str]) -> String {
    run_node_with(daemon, module, script, checks, &[])
}

/// [`run_node`] with `env` added to the script's environment.
pub fn run_node_with(
    daemon: &Daemon,
    module: &Path,
    script: &str,
    checks: &[&str],
    env: &[(&str, &str)],
) -> String {
    let mut vars = vec![("BERTH_E2B_JS", module.as_os_str())];
    vars.extend(env.iter().map(|(name, value)| (*name, OsStr::new(*value))));
    run_script(daemon, OsStr::new("node"), script, checks, &vars)
}

/// Runs `tests/e2b_sdk/<script>` with `program` against `daemon`, pointed at it by the
/// three variables of docs/e2b.md (plus `env`), and asserts that it printed `ok <check>` for
/// exactly `checks`, in order. Answers the script's output.
fn run_script(
    daemon: &Daemon,
    program: &OsStr,
    script: &str,
    checks: &[&str],
    env: &[(&str, &OsStr)],
) -> String {
    let (addr, key) = daemon.api_endpoint();
    let url = format!("http://{addr}/e2b");
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2b_sdk")
        .join(script);
    let log = daemon.dir().join(format!("{script}.out"));
    let mut cmd = Command::new(program);
    cmd.arg(&path)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", daemon.dir())
        .env("E2B_API_URL", &url)
        .env("E2B_SANDBOX_URL", &url)
        .env("E2B_API_KEY", &key)
        .envs(env.iter().copied());
    let (status, output) = run_logged(&mut cmd, script, &log, SCRIPT_DEADLINE);
    let passed: Vec<&str> = output
        .lines()
        .filter_map(|l| l.strip_prefix("ok "))
        .collect();
    assert!(
        status.is_some_and(|s| s.success()) && passed == checks,
        "{script} ({status:?}) passed {passed:?} of {checks:?}:\n{output}\n{}",
        daemon.logs()
    );
    output
}
