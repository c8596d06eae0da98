//! Data dirs: one from each earlier release still starts (its database at every earlier
//! schema version, migrated at start; its template files and berth.toml with the key names
//! that release used, read and warned about in the log), so an upgrade loses nothing
//! silently; and a data dir in use refuses a second daemon at once.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{assert_one_line_error, berth, e2e_skip_reason, Daemon};

const MIGRATIONS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../store/migrations");

/// The schema migrations in order, as `(version, sql)`.
fn migrations() -> Vec<(u32, String)> {
    let mut found: Vec<(u32, String)> = fs::read_dir(MIGRATIONS)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let version = name.split('_').next()?.parse().ok()?;
            Some((version, fs::read_to_string(e.path()).ok()?))
        })
        .collect();
    found.sort_by_key(|(v, _)| *v);
    found
}

/// `berth.db` as the release with schema `version` left it (sqlite3, as berth applies
/// migrations: each in a transaction, recorded in `schema_migrations`).
fn old_database(dir: &Path, version: u32, migrations: &[(u32, String)]) {
    let mut script = String::from(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, \
         applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')));\n",
    );
    for (v, sql) in migrations.iter().filter(|(v, _)| *v <= version) {
        script += &format!(
            "BEGIN;\n{sql}\nINSERT INTO schema_migrations (version) VALUES ({v});\nCOMMIT;\n"
        );
    }
    let out = Command::new("sqlite3")
        .arg(dir.join("berth.db"))
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "schema {version}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What every earlier release could have left: a template with the old idle key and a
/// berth.toml with the old stream key.
fn old_files(dir: &Path) {
    fs::create_dir_all(dir.join("templates")).unwrap();
    fs::write(
        dir.join("templates/old.toml"),
        "name = \"old\"\nbase = \"host\"\nidle_timeout_s = 600\n",
    )
    .unwrap();
    fs::write(
        dir.join("berth.toml"),
        "[server]\nmax_event_streams_per_tenant = 32\n",
    )
    .unwrap();
}

#[test]
fn a_data_dir_of_each_earlier_release_starts_with_its_templates() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    if Command::new("sqlite3").arg("-version").output().is_err() {
        berth_testkit::skip("sqlite3", "no sqlite3 to write an old database with");
        return;
    }
    let migrations = migrations();
    let current = migrations.last().unwrap().0;
    assert!(current >= 16, "{current}");
    for version in 1..current {
        let dir = tempfile::tempdir().unwrap();
        old_database(dir.path(), version, &migrations);
        old_files(dir.path());
        let daemon = Daemon::start_in(dir, None, &[]);
        let listed: serde_json::Value =
            serde_json::from_str(&daemon.berth_ok(&["template", "ls", "--json"])).unwrap();
        let old = listed["templates"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "old")
            .unwrap_or_else(|| panic!("schema {version}: template old lost: {listed}"));
        assert_eq!(old["stop_after_s"], 600, "schema {version}: {old}");
        daemon.berth_ok(&["box", "create", "kept", "--template", "old"]);
        let shown: serde_json::Value =
            serde_json::from_str(&daemon.berth_ok(&["box", "show", "kept"])).unwrap();
        assert_eq!(shown["stop_after_s"], 600, "schema {version}: {shown}");
        let logs = daemon.logs();
        for warned in [
            "idle_timeout_s = 600 is the old name",
            "max_event_streams_per_tenant",
        ] {
            assert!(
                logs.contains(warned),
                "schema {version}: no {warned:?} in\n{logs}"
            );
        }
    }
}

#[test]
fn a_second_daemon_on_a_data_dir_in_use_is_refused_at_once() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let began = Instant::now();
    let out = berth()
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(daemon.dir())
        .output()
        .unwrap();
    // Before the runtimes' probes (qemu's boots a kernel, seconds even under KVM).
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "{:?}",
        began.elapsed()
    );
    assert_one_line_error(
        &out,
        1,
        &["already running", &daemon.dir().display().to_string()],
    );
    // The first daemon goes on serving.
    daemon.berth_ok(&["box", "ls"]);
}
