//! berth's own TypeScript SDK (`sdk/typescript`) against a real `berth up`: its `node --test`
//! suite (`sdk/typescript/test`) makes its own boxes through the SDK, drives every call on
//! them, and deletes them; this test builds the SDK from this checkout (`npm run build`, so
//! the suite never runs a stale `dist`), runs the suite with `BERTH_URL` and
//! `BERTH_API_KEY` pointing at the daemon, asserts it passed, and that no box was left
//! behind. The daemon's data dir holds the suites' own template too (`svc`, with a service:
//! `common::sdk_suite`).

mod common;

use std::process::Command;
use std::time::Duration;

use common::{api_coverage, e2e_skip_reason, run_logged, sdk_suite};

/// What the build (types generated from openapi.json, then tsc) may take on a loaded machine.
const BUILD_DEADLINE: Duration = Duration::from_secs(300);
/// What the whole suite may take on a loaded machine.
const SUITE_DEADLINE: Duration = Duration::from_secs(600);

#[test]
fn the_typescript_sdk_suite_passes_against_a_real_daemon() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", reason);
        return;
    }
    let sdk = match berth_testkit::sdk_typescript::find() {
        Ok(sdk) => sdk,
        Err(reason) => {
            berth_testkit::skip("sdk-typescript", reason);
            return;
        }
    };
    let daemon = sdk_suite::daemon(None);
    let (addr, key) = daemon.api_endpoint();

    let mut build = Command::new("npm");
    build.args(["run", "build"]).current_dir(&sdk);
    let build_log = daemon.dir().join("npm-build.out");
    let (status, output) = run_logged(&mut build, "npm run build", &build_log, BUILD_DEADLINE);
    assert!(
        status.is_some_and(|s| s.success()),
        "npm run build ({status:?}) failed:\n{output}"
    );

    let log = daemon.dir().join("node-test.out");
    let mut cmd = Command::new("node");
    cmd.arg("--test")
        .args(berth_testkit::sdk_typescript::suite_files())
        .current_dir(&sdk)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", daemon.dir())
        .env("BERTH_URL", format!("http://{addr}"))
        .env("BERTH_API_KEY", &key);
    let (status, output) = run_logged(&mut cmd, "node --test", &log, SUITE_DEADLINE);
    assert!(
        status.is_some_and(|s| s.success()),
        "node --test ({status:?}) failed:\n{output}\n{}",
        daemon.logs()
    );
    api_coverage::assert_sdk_suite_covered_the_api_and_left_no_box(&daemon);
}
