//! `berth cluster`: the CA is made once with a private key, and join tokens are made,
//! listed and revoked in the store `berth up` would open (SQLite by `--store sqlite:PATH`;
//! PostgreSQL by `--store` with the password from the environment, or by `[store]` in the
//! data dir's berth.toml).

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use common::*;

fn berth_in(data_dir: &Path, args: &[&str]) -> std::process::Output {
    berth()
        .arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("BERTH_STORE_PASSWORD")
        .env_remove("PGPASSWORD")
        .output()
        .unwrap()
}

fn ok(out: std::process::Output) -> (String, String) {
    assert!(
        out.status.success(),
        "status {:?}, stderr: {}",
        out.status,
        stderr(&out)
    );
    (stdout(&out), stderr(&out))
}

fn is_token(line: &str) -> bool {
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    line.split_once('.')
        .is_some_and(|(id, secret)| hex(id, 16) && hex(secret, 64))
}

#[test]
fn init_makes_the_ca_once_with_a_private_key() {
    let data = tempfile::tempdir().unwrap();
    let ca = data.path().join("ca");
    let ca_arg = ca.to_str().unwrap();
    let (said, _) = ok(berth_in(data.path(), &["cluster", "init", "--dir", ca_arg]));
    assert!(said.contains(ca_arg), "{said}");
    assert!(said.contains("must stay secret"), "{said}");
    let key_mode = std::fs::metadata(ca.join("ca.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(key_mode & 0o777, 0o600);
    let cert = std::fs::read_to_string(ca.join("ca.crt")).unwrap();
    assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");

    let again = berth_in(data.path(), &["cluster", "init", "--dir", ca_arg]);
    assert_one_line_error(&again, 1, &["already holds a cluster CA"]);
    assert_eq!(
        std::fs::read_to_string(ca.join("ca.crt")).unwrap(),
        cert,
        "untouched"
    );
}

/// Makes, lists and revokes tokens with `store_args`; `env` is set on each command.
fn tokens_round_trip(data_dir: &Path, store_args: &[&str], env: &[(&str, &str)]) {
    let run = |args: &[&str]| {
        let mut cmd = berth();
        cmd.arg("--data-dir")
            .arg(data_dir)
            .args(args)
            .args(store_args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let (printed, said) = ok(run(&["cluster", "token", "--uses", "2", "--ttl", "30m"]));
    let token = printed.trim_end();
    assert_eq!(printed.lines().count(), 1, "{printed:?}");
    assert!(is_token(token), "{token:?}");
    assert!(said.contains("admits 2 nodes until 20"), "{said}");
    let id = token.split_once('.').unwrap().0;

    let (second, _) = ok(run(&["cluster", "token"]));
    assert_ne!(second.trim_end(), token);

    let (listed, _) = ok(run(&["cluster", "tokens"]));
    assert!(listed.starts_with("ID"), "{listed}");
    let row = listed
        .lines()
        .find(|l| l.starts_with(id))
        .unwrap_or_else(|| {
            panic!("{id} not in {listed}");
        });
    assert!(row.split_whitespace().nth(1) == Some("2"), "{row}");
    assert!(
        !listed.contains(token.split_once('.').unwrap().1),
        "no secret listed"
    );

    let (revoked, _) = ok(run(&["cluster", "revoke-token", id]));
    assert!(revoked.contains(id), "{revoked}");
    let (listed, _) = ok(run(&["cluster", "tokens"]));
    assert!(!listed.contains(id), "{listed}");
    assert_one_line_error(
        &run(&["cluster", "revoke-token", id]),
        1,
        &["no join token", "berth cluster tokens"],
    );
}

#[test]
fn tokens_are_made_listed_and_revoked_on_sqlite() {
    let data = tempfile::tempdir().unwrap();
    let db = data.path().join("elsewhere.db");
    let store = format!("sqlite:{}", db.display());
    tokens_round_trip(data.path(), &["--store", &store], &[]);
    assert!(db.exists());
    assert!(!data.path().join("berth.db").exists(), "--store was used");
}

#[test]
fn a_bad_ttl_or_store_is_said_in_one_line() {
    let data = tempfile::tempdir().unwrap();
    let zero = berth_in(data.path(), &["cluster", "token", "--ttl", "0"]);
    assert_eq!(zero.status.code(), Some(2), "{}", stderr(&zero));
    assert!(
        stderr(&zero).contains("admits nothing"),
        "{}",
        stderr(&zero)
    );
    let none = berth_in(data.path(), &["cluster", "token", "--uses", "0"]);
    assert_eq!(none.status.code(), Some(2), "{}", stderr(&none));
    let password = berth_in(
        data.path(),
        &[
            "cluster",
            "tokens",
            "--store",
            "postgres://u:hunter2@db/berth",
        ],
    );
    assert_one_line_error(&password, 1, &["password"]);
    assert!(!stderr(&password).contains("hunter2"));
}

#[test]
fn tokens_are_made_listed_and_revoked_on_postgres() {
    let Some(postgres) = berth_testkit::postgres::PgServer::start() else {
        return;
    };
    // By --store, with the password from the environment.
    let data = tempfile::tempdir().unwrap();
    let url = postgres.new_database();
    tokens_round_trip(
        data.path(),
        &["--store", &url],
        &[("BERTH_STORE_PASSWORD", postgres.password())],
    );
    // By [store] in the data dir's berth.toml, as `berth up` reads it.
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join("berth.toml"), store_on(&postgres)).unwrap();
    tokens_round_trip(data.path(), &[], &[]);
    assert!(!data.path().join("berth.db").exists());
}
