//! `berth up` on PostgreSQL (`[store] url`, `--store`): the records live in a Postgres the
//! test starts from Debian's binaries, survive a daemon crash, and a bad store setting
//! stops the start with one line saying what to do.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

/// `psql` on the test's database: one query, its unaligned output.
fn psql(postgres: &berth_testkit::postgres::PgServer, url: &str, query: &str) -> String {
    let out = Command::new(postgres.bin("psql"))
        .args([url, "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", query])
        .env("PGPASSWORD", postgres.password())
        .output()
        .unwrap();
    assert!(out.status.success(), "psql: {}", stderr(&out));
    stdout(&out)
}

#[test]
fn a_daemon_on_postgres_keeps_its_boxes_and_their_logs_across_a_crash() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let Some(postgres) = berth_testkit::postgres::PgServer::start() else {
        return;
    };
    let config = store_on(&postgres);
    let url = config
        .lines()
        .find_map(|l| l.strip_prefix("url = "))
        .map(|u| u.trim_matches('"').to_owned())
        .unwrap();
    let mut daemon = Daemon::start_with_config(&config);
    assert!(!daemon.dir().join("berth.db").exists());

    daemon.berth_ok(&["box", "create", "bob", "--template", "echo"]);
    let answer = daemon.berth_ok(&["send", "bob", "remember 42", "--json"]);
    let last = json(answer.lines().last().unwrap());
    assert!(
        last["data"]["result"].as_str().unwrap().contains("42"),
        "{last}"
    );
    assert_eq!(
        daemon.berth_ok(&["exec", "bob", "--", "echo", "hi"]),
        "hi\n"
    );

    // The rows are in Postgres, not in a file of the data dir.
    assert_eq!(
        psql(&postgres, &url, "SELECT name FROM boxes").trim(),
        "bob"
    );
    let stored: u64 = psql(&postgres, &url, "SELECT count(*) FROM events")
        .trim()
        .parse()
        .unwrap();
    assert!(stored >= 3, "{stored} events stored");

    daemon.crash_and_restart();
    let boxes = json(&daemon.berth_ok(&["box", "ls", "--json"]));
    assert_eq!(boxes["boxes"][0]["name"], "bob", "{boxes}");
    let again = daemon.berth_ok(&["send", "bob", "and 7", "--json"]);
    let last = json(again.lines().last().unwrap());
    assert!(
        last["data"]["result"].as_str().unwrap().contains('7'),
        "{last}"
    );
    let seqs: Vec<u64> = again
        .lines()
        .map(|l| json(l)["seq"].as_u64().unwrap())
        .collect();
    assert!(
        seqs[0] > stored,
        "the log went on after the crash: {seqs:?} after {stored} stored"
    );
    daemon.berth_ok(&["box", "rm", "bob"]);
}

#[test]
fn a_password_in_the_store_url_is_refused_and_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let out = berth()
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--store", "postgres://berth:hunter2@127.0.0.1:1/berth"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("password_file"), "{err}");
    assert!(!err.contains("hunter2"), "the password was echoed: {err}");
    assert!(!dir.path().join("berth.db").exists());
}

#[test]
fn a_database_that_does_not_answer_stops_the_start_with_its_location() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let url = format!("postgres://berth@127.0.0.1:{}/berth", closed_port());
    let mut child = berth()
        .args(["up", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .args(["--store", &url])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_or_kill(&mut child, Duration::from_secs(120));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.is_some_and(|s| !s.success()), "{status:?}: {err}");
    assert!(err.contains("cannot open the store"), "{err}");
    assert!(err.contains(&url), "the error names the database: {err}");
}
