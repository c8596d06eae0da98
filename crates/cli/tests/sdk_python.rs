//! berth's own Python SDK (`sdk/python`) against a real `berth up`: its pytest suite
//! (`sdk/python/tests`) makes its own boxes through the SDK, drives every call on them, and
//! deletes them; this test runs it with `BERTH_URL` and `BERTH_API_KEY` pointing at the
//! daemon, asserts pytest passed, and that no box was left behind. The daemon's data dir
//! holds the suites' own template too (`svc`, with a service: `common::sdk_suite`). It runs
//! twice: on the embedded SQLite store, and on a PostgreSQL server the test starts (every
//! operation of the API on the many-hosts database).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{api_coverage, e2e_skip_reason, run_logged, sdk_suite, Daemon};

/// What the whole suite may take on a loaded machine.
const SUITE_DEADLINE: Duration = Duration::from_secs(600);

#[test]
fn the_python_sdk_suite_passes_against_a_real_daemon() {
    let Some(python) = python_or_skip() else {
        return;
    };
    run_suite(&python, &sdk_suite::daemon(None));
}

#[test]
fn the_python_sdk_suite_passes_against_a_daemon_on_postgres() {
    let Some(python) = python_or_skip() else {
        return;
    };
    let Some(postgres) = berth_testkit::postgres::PgServer::start() else {
        return;
    };
    let daemon = sdk_suite::daemon(Some(&common::store_on(&postgres)));
    run_suite(&python, &daemon);
    assert!(
        !daemon.dir().join("berth.db").exists(),
        "a daemon on Postgres made a SQLite file"
    );
}

/// The SDK's venv's python, or `None` after the skip of what this host lacks.
fn python_or_skip() -> Option<std::path::PathBuf> {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", reason);
        return None;
    }
    match berth_testkit::sdk_python::find() {
        Ok(python) => Some(python),
        Err(reason) => {
            berth_testkit::skip("sdk-python", reason);
            None
        }
    }
}

fn run_suite(python: &std::path::Path, daemon: &Daemon) {
    let (addr, key) = daemon.api_endpoint();
    let sdk = berth_testkit::sdk_python::sdk_dir();
    let log = daemon.dir().join("pytest.out");
    let mut cmd = Command::new(python);
    cmd.args([
        "-m",
        "pytest",
        "tests",
        "-x",
        "-q",
        "-p",
        "no:cacheprovider",
    ])
    .current_dir(&sdk)
    .env_clear()
    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
    .env("HOME", daemon.dir())
    .env("PYTHONUNBUFFERED", "1")
    .env("PYTHONDONTWRITEBYTECODE", "1")
    .env("BERTH_URL", format!("http://{addr}"))
    .env("BERTH_API_KEY", &key);
    let (status, output) = run_logged(&mut cmd, "pytest", &log, SUITE_DEADLINE);
    assert!(
        status.is_some_and(|s| s.success()),
        "pytest ({status:?}) failed:\n{output}\n{}",
        daemon.logs()
    );
    api_coverage::assert_sdk_suite_covered_the_api_and_left_no_box(daemon);
}

/// The coverage check itself: requests are matched to their operations, the most literal
/// template first, and an operation never called is named.
#[test]
fn requests_are_matched_to_their_operations() {
    let ops = api_coverage::operations();
    let op = |m: &str, p: &str| api_coverage::operation_of(&ops, m, p).map(|(_, t)| t.as_str());
    assert_eq!(op("GET", "/v1/boxes/alice"), Some("/v1/boxes/{box_ref}"));
    assert_eq!(
        op("POST", "/v1/boxes/alice/ports/8000/links"),
        Some("/v1/boxes/{box_ref}/ports/{port}/links")
    );
    assert_eq!(
        op("GET", "/v1/boxes/alice/ports/8000/a/b"),
        Some("/v1/boxes/{box_ref}/ports/{port}/{path}")
    );
    assert_eq!(op("PUT", "/v1/boxes"), None);
    let log = "x INFO berth_server::api: request method=GET path=\"/v1/health\" status=200\n";
    let left = api_coverage::uncovered(log);
    assert!(!left.contains(&"GET /v1/health".to_owned()), "{left:?}");
    assert!(left.contains(&"POST /v1/boxes".to_owned()), "{left:?}");
    assert!(!left.iter().any(|l| l.contains("/v1/web/push")), "{left:?}");
}
