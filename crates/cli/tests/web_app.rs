//! The web app end to end: a real daemon (sandbox boxes of the `echo` template, and one of
//! `desktop` once its image is built; TLS with a test certificate once `berth up` has
//! `--tls-cert`), Debian's chromium driven by `@playwright/test` (`web/e2e/tests/`) as a
//! 390×844 phone, and a Web Push service of the test's own. Each test, its screenshots (`target/web-screenshots/`) and timings are
//! reported by Playwright; this test starts what it needs, streams that output, and fails
//! when any test did.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{berth, closed_port, e2e_skip_reason, Daemon};

/// A whole Playwright run: boxes wake on a loaded 2-core host, and one scenario waits for
/// an idle reclaim. Past this something hangs, and the run is killed.
const RUN_LIMIT: Duration = Duration::from_secs(15 * 60);

/// Playwright's test runner, as npm installs it in web/e2e.
const PLAYWRIGHT_CLI: &str = "node_modules/@playwright/test/cli.js";

fn repo_root() -> PathBuf {
    // crates/cli → the workspace
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_path_buf()
}

/// `npm ci` in web/e2e when its packages are missing: the versions its lockfile pins, and
/// never a browser (Playwright drives Debian's chromium).
fn install_e2e_packages(npm: &Path, dir: &Path) {
    if dir.join(PLAYWRIGHT_CLI).is_file() && dir.join("node_modules/axe-core").is_dir() {
        return;
    }
    let status = Command::new(npm)
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "npm ci in {} failed: {status}",
        dir.display()
    );
}

/// Whether this `berth up` serves TLS itself (`--tls-cert`).
fn serves_tls() -> bool {
    let help = berth().args(["up", "--help"]).output().unwrap();
    String::from_utf8_lossy(&help.stdout).contains("--tls-cert")
}

/// The daemon for the web app: the sandbox runtime, `[push]` letting the test's push
/// service on `push_port` be an endpoint, and TLS with `tls` (cert, key) when given.
fn start_daemon(push_port: u16, tls: Option<(&Path, &Path)>, dir: tempfile::TempDir) -> Daemon {
    let config = format!("[push]\nallow_endpoints = [\"http://127.0.0.1:{push_port}\"]\n");
    let args: Vec<&OsStr> = match tls {
        Some((cert, key)) => vec![
            "--tls-cert".as_ref(),
            cert.as_os_str(),
            "--tls-key".as_ref(),
            key.as_os_str(),
        ],
        None => Vec::new(),
    };
    Daemon::start_in(dir, Some(&config), &args)
}

/// Builds the `desktop` image for the Desktop tab's test (`tests/desktop.spec.mjs`) through
/// the tests' image cache (`berth image build --template desktop`: debootstrap and XFCE,
/// minutes the first time, then shared); `Err` with the reason that test is skipped when
/// the Debian mirror cannot be reached.
fn build_desktop_image(daemon: &Daemon) -> Result<(), String> {
    common::link_test_image_cache(daemon.dir());
    let built = daemon.berth(&["image", "build", "--template", "desktop"]);
    if built.status.success() {
        return Ok(());
    }
    let err = common::stderr(&built);
    if err.contains("no network to the Debian mirror") {
        return Err(err.trim().to_owned());
    }
    panic!("berth image build --template desktop failed: {err}");
}

/// Every box of the daemon is deleted when this is dropped, so a failed run leaves none.
struct RemoveBoxes<'a>(&'a Daemon);

impl Drop for RemoveBoxes<'_> {
    fn drop(&mut self) {
        let out = self.0.berth(&["box", "ls", "--json"]);
        let listed: serde_json::Value =
            serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
        let boxes = listed
            .get("boxes")
            .and_then(|b| b.as_array())
            .or(listed.as_array())
            .cloned()
            .unwrap_or_default();
        for name in boxes.iter().filter_map(|b| b["name"].as_str()) {
            self.0.berth(&["box", "rm", name]);
        }
    }
}

/// Waits for `child` (the leader of its own process group) up to `limit`; past that kills
/// its whole group, the browser it started included, and says so.
fn wait_within(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            // SAFETY: kill(2) on the process group our child leads (not yet reaped, so its
            // id is still ours); it touches no memory.
            unsafe {
                libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL);
            }
            let _ = child.wait();
            panic!("the Playwright run in web/e2e still ran after {limit:?}: killed");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_web_app_works_on_a_phone_end_to_end() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let browser = match berth_testkit::browser::find() {
        Ok(browser) => browser,
        Err(reason) => {
            berth_testkit::skip("browser", reason);
            return;
        }
    };
    let root = repo_root();
    let e2e = root.join("web/e2e");
    install_e2e_packages(&browser.npm, &e2e);

    let dir = tempfile::tempdir().unwrap();
    let tls =
        serves_tls().then(|| common::self_signed(dir.path(), "web", &["127.0.0.1", "localhost"]));
    let push_port = closed_port();
    let daemon = start_daemon(
        push_port,
        tls.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
        dir,
    );
    let _cleanup = RemoveBoxes(&daemon);
    let desktop = build_desktop_image(&daemon);
    if let Err(reason) = &desktop {
        berth_testkit::skip("image-build", format!("the Desktop tab's test: {reason}"));
    }
    let url = fs::read_to_string(daemon.dir().join("berth.url")).unwrap();
    let admin_key = fs::read_to_string(daemon.dir().join("admin.key")).unwrap();
    let screenshots = root.join("target/web-screenshots");

    let mut run = Command::new(&browser.node);
    run.arg(e2e.join(PLAYWRIGHT_CLI))
        .arg("test")
        .current_dir(&e2e)
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .env("BERTH_URL", url.trim())
        .env("BERTH_ADMIN_KEY", admin_key.trim())
        .env("BERTH_BIN", common::BERTH)
        .env("BERTH_DATA_DIR", daemon.dir())
        .env("BERTH_SCREENSHOTS", &screenshots)
        .env("BERTH_PUSH_PORT", push_port.to_string())
        .env("BERTH_CHROMIUM", &browser.chromium)
        .env(
            "BERTH_COOKIE_APP",
            root.join("crates/cli/tests/fixtures/cookie_app.py"),
        )
        .env_remove("BERTH_API_KEY")
        .stdin(Stdio::null())
        .process_group(0);
    if let Err(reason) = &desktop {
        run.env("BERTH_DESKTOP_SKIP", reason);
    }
    if let Some((cert, _)) = &tls {
        // node's fetch (the test's own API calls) trusts the test certificate too.
        run.env("BERTH_TLS_CERT", cert)
            .env("NODE_EXTRA_CA_CERTS", cert);
    }
    // stdout and stderr are inherited: each test's line streams as it ends.
    let mut child = run.spawn().unwrap();
    let status = wait_within(&mut child, RUN_LIMIT);
    assert!(
        status.success(),
        "the web app's Playwright tests failed ({status}); screenshots in {}; the daemon's log ends:\n{}",
        screenshots.display(),
        log_tail(&daemon.log, 80)
    );
}

/// The last `lines` lines of the daemon's log: a whole run's request lines would bury why.
fn log_tail(log: &Path, lines: usize) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
