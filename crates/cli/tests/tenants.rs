//! `berth tenant create|update|ls` and `berth tenant key add|ls|rotate|rm` against a real
//! `berth up`: quotas shown and enforced (one `berth:` line on refusal), keys rotated and
//! revoked at once. No box is started, so any host that runs the daemon runs this.

mod common;

use common::*;

/// The `berth_…` key in a command's output.
fn key_in(out: &str) -> String {
    out.split_whitespace()
        .find(|w| w.starts_with("berth_"))
        .unwrap_or_else(|| panic!("no key in {out:?}"))
        .to_owned()
}

/// The `key_…` id in a command's output.
fn key_id_in(out: &str) -> String {
    out.split_whitespace()
        .find(|w| w.starts_with("key_"))
        .unwrap_or_else(|| panic!("no key id in {out:?}"))
        .to_owned()
}

#[test]
fn quotas_and_keys_from_the_command_line() {
    let daemon = Daemon::start();
    let created = daemon.berth_ok(&[
        "tenant",
        "create",
        "acme",
        "--max-boxes",
        "1",
        "--max-memory-mib",
        "4096",
    ]);
    let key = key_in(&created);
    let as_acme =
        |args: &[&str], key: &str| daemon.berth_with(args, None, &[("BERTH_API_KEY", key)]);

    let out = as_acme(&["box", "create", "a"], &key);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = as_acme(&["box", "create", "b"], &key);
    assert_one_line_error(&out, 1, &["quota exceeded", "max_boxes is 1", "uses 1"]);

    let table = daemon.berth_ok(&["tenant", "ls"]);
    let acme = table
        .lines()
        .find(|l| l.starts_with("acme "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(acme.contains("1/1") && acme.contains("/4096"), "{table}");
    // A tenant sees its own usage and quota, not another's.
    let own = as_acme(&["tenant", "show", "acme"], &key);
    assert!(stdout(&own).contains("1/1"), "{}", stderr(&own));
    let out = as_acme(&["tenant", "show", "default"], &key);
    assert_one_line_error(&out, 1, &["no tenant"]);
    // Only the admin lists or changes tenants.
    let out = as_acme(&["tenant", "ls"], &key);
    assert_one_line_error(&out, 1, &[]);
    let out = as_acme(&["tenant", "update", "acme", "--max-boxes", "5"], &key);
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth(&["tenant", "update", "acme", "--max-boxes", "many"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));

    let updated = daemon.berth_ok(&["tenant", "update", "acme", "--max-boxes", "none"]);
    assert!(updated.contains("1/-"), "{updated}");
    let out = as_acme(&["box", "create", "b"], &key);
    assert!(out.status.success(), "{}", stderr(&out));

    // The tenant rotates its own key: the new one works, the old one is refused at once.
    let keys = as_acme(&["tenant", "key", "ls", "acme"], &key);
    assert!(keys.status.success(), "{}", stderr(&keys));
    let old_id = key_id_in(&stdout(&keys));
    assert!(stdout(&keys).contains(&key[..14]), "{}", stdout(&keys));
    let rotated = as_acme(
        &["tenant", "key", "rotate", "acme", &old_id, "--revoke-old"],
        &key,
    );
    assert!(rotated.status.success(), "{}", stderr(&rotated));
    let new_key = key_in(&stdout(&rotated));
    assert!(
        stdout(&rotated).contains(&format!("key {old_id} revoked")),
        "{}",
        stdout(&rotated)
    );
    let out = as_acme(&["box", "ls"], &key);
    assert_one_line_error(&out, 1, &[]);
    let out = as_acme(&["box", "ls"], &new_key);
    assert!(out.status.success(), "{}", stderr(&out));

    // The admin adds and removes a key of the tenant.
    let added = daemon.berth_ok(&["tenant", "key", "add", "acme"]);
    let added_id = key_id_in(&added);
    let keys = daemon.berth_ok(&["tenant", "key", "ls", "acme"]);
    assert_eq!(keys.lines().count(), 3, "header and two keys: {keys}");
    daemon.berth_ok(&["tenant", "key", "rm", "acme", &added_id]);
    let out = as_acme(&["box", "ls"], &key_in(&added));
    assert_one_line_error(&out, 1, &[]);
    let out = daemon.berth(&["tenant", "key", "rm", "acme", &added_id]);
    assert_one_line_error(&out, 1, &["no API key"]);
}

#[test]
fn tenant_help_names_quotas_and_keys() {
    let out = berth().args(["tenant", "--help"]).output().unwrap();
    let help = stdout(&out);
    for needle in ["create", "update", "ls", "key"] {
        assert!(help.contains(needle), "{needle} not in {help}");
    }
    let out = berth()
        .args(["tenant", "create", "--help"])
        .output()
        .unwrap();
    let help = stdout(&out);
    for needle in [
        "--max-boxes",
        "--max-running",
        "--max-memory-mib",
        "--max-disk-mib",
    ] {
        assert!(help.contains(needle), "{needle} not in {help}");
    }
    let out = berth().args(["tenant", "key", "--help"]).output().unwrap();
    let help = stdout(&out);
    for needle in ["add", "ls", "rm", "rotate"] {
        assert!(help.contains(needle), "{needle} not in {help}");
    }
}
