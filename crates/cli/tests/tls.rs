//! `berth up` over TLS from the CLI's side: the daemon started with certificate files, and
//! client commands on the same host reaching it through the certificate it pinned in
//! `berth.cert` (and refusing any other).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

/// A self-signed pair for 127.0.0.1, written into `dir` as `(cert, key)`.
fn self_signed(dir: &Path, stem: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    common::self_signed(dir, stem, &["127.0.0.1"])
}

#[test]
fn up_with_a_missing_key_file_fails_in_one_line_naming_it() {
    let files = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let (cert, _) = self_signed(files.path(), "a");
    let missing = files.path().join("missing.key");
    let out = berth()
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&missing)
        .output()
        .unwrap();
    assert_one_line_error(&out, 1, &["missing.key", "--tls-key"]);
    // Nothing was started: no URL for clients to find.
    assert!(!data.path().join("berth.url").exists());
}

#[test]
fn client_commands_reach_a_tls_daemon_through_its_pinned_certificate() {
    if let Some(why) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", why);
        return;
    }
    let files = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(files.path(), "served");
    let data_dir = tempfile::tempdir().unwrap();
    let (log, out) = (
        data_dir.path().join("daemon.stderr"),
        data_dir.path().join("daemon.stdout"),
    );
    let listen = format!("127.0.0.1:{}", closed_port());
    let child = berth()
        .args(["up", "--listen", &listen, "--data-dir"])
        .arg(data_dir.path())
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut daemon = Daemon {
        child,
        data_dir,
        log,
        out,
        args: Vec::new(),
    };

    // The client finds https:// in berth.url and pins berth.cert.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = daemon.child.try_wait().unwrap() {
            panic!("berth up exited ({status}):\n{}", daemon.logs());
        }
        if daemon.berth(&["box", "ls"]).status.success() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "berth box ls did not succeed over TLS in 60s:\n{}",
            daemon.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let url = std::fs::read_to_string(daemon.dir().join("berth.url")).unwrap();
    assert_eq!(url.trim(), format!("https://{listen}"));
    // The terminal's way in is the same connector: a WebSocket upgrade through TLS gets the
    // daemon's answer (no such box), not a TLS failure.
    if let Some(shell) = common::terminal::berth_on_a_terminal(daemon.dir(), &["shell", "nobox"]) {
        let screen = stdout(&shell);
        assert_eq!(shell.status.code(), Some(1), "{screen}");
        assert!(
            screen.starts_with("berth: ") && screen.contains("nobox"),
            "{screen:?}"
        );
        assert!(
            !screen.contains("TLS") && !screen.contains("panicked"),
            "{screen:?}"
        );
    }

    // The same daemon by another name is not this host's berth.url: checked against the
    // public roots, which never signed our certificate.
    let other = daemon.berth_with(
        &["box", "ls"],
        None,
        &[("BERTH_URL", &format!("https://localhost:{}", &listen[10..]))],
    );
    assert_one_line_error(&other, 1, &["TLS", "public root"]);

    // A server presenting any other certificate than the pinned one is refused.
    let (impostor, _) = self_signed(daemon.dir(), "impostor");
    std::fs::copy(&impostor, daemon.dir().join("berth.cert")).unwrap();
    let refused = daemon.berth(&["box", "ls"]);
    assert_one_line_error(&refused, 1, &["TLS", "berth.cert"]);
}
