//! The host's own files and other local users: with a real daemon, a real sandbox box that
//! has run and made egress decisions, and a secret set, no file in the data dir that holds
//! state is readable by another host user, and no directory that holds state is listable
//! or searchable by one; a box's mounted volume is out of their reach.
//!
//! Needs root, runc and berth-init; otherwise skips (`berth_testkit::skip`).

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;

/// What another host user may read, by design: the daemon's address, and what every box
/// reads anyway (templates and their host rootfs stand-in, shared layers, VM images).
fn public(rel: &Path) -> bool {
    let first = rel.components().next().map(|c| c.as_os_str().to_owned());
    matches!(rel.to_str(), Some("berth.url" | "berth.toml"))
        || matches!(first.as_deref().and_then(|f| f.to_str()), Some("templates" | "images" | "layers"))
        // The test's own logs of the daemon.
        || matches!(rel.to_str(), Some("daemon.stderr" | "daemon.stdout"))
}

/// A permission bit given to users outside the host's root and the box's own ids: the
/// "other" bits, and the group bits of a host group (a box's mapped group is no host
/// user's).
fn loose(meta: &fs::Metadata, other: u32) -> bool {
    let group = (other << 3) & meta.mode();
    meta.mode() & other != 0 || (group != 0 && meta.gid() < 65536)
}

/// Every path under `dir` another host user can reach and read (a file) or list or
/// search (a directory) though it holds state. `reachable`: they can search `dir`.
fn exposed(data: &Path, dir: &Path, reachable: bool, found: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = fs::symlink_metadata(&path).unwrap();
        let rel = path.strip_prefix(data).unwrap().to_owned();
        if meta.file_type().is_symlink() || public(&rel) {
            continue;
        }
        let describe =
            |what: &str| format!("{} ({:o}, {what})", rel.display(), meta.mode() & 0o7777);
        if meta.is_dir() {
            let searchable = reachable && loose(&meta, 0o001);
            if reachable && loose(&meta, 0o004) {
                found.push(describe("listable by other users"));
            }
            // A mounted volume is the box's: what matters is that others cannot reach it.
            if meta.dev() == fs::metadata(data).unwrap().dev() {
                exposed(data, &path, searchable, found);
            } else if searchable {
                found.push(describe("a mounted volume other users can reach"));
            }
        } else if reachable && loose(&meta, 0o004) {
            found.push(describe("readable by other users"));
        }
    }
}

/// The box template: a harness that idles, an allowlist and a credential rule, so the
/// box's boot makes the gateway's CA and boot state.
const TEMPLATE: &str = r#"name = "private"
base = "host"

[harness]
command = ["sleep", "infinity"]

[egress]
allow = ["api.example.test"]

[[egress.credentials]]
name = "anthropic"
hosts = ["api.example.test"]
header = "x-api-key"
placeholder_env = "ANTHROPIC_API_KEY"
"#;

#[test]
fn no_state_in_the_data_dir_is_open_to_other_host_users() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let data: PathBuf = daemon.dir().to_owned();
    fs::create_dir_all(data.join("templates")).unwrap();
    fs::write(data.join("templates/private.toml"), TEMPLATE).unwrap();
    daemon.berth_ok(&["template", "reload"]);
    let out = daemon.berth_with(
        &["secret", "set", "anthropic"],
        Some(b"sk-test-value\n"),
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    daemon.berth_ok(&["box", "create", "p1", "--template", "private"]);
    // The exec wakes the box; the refused connection is an egress decision (audit line).
    daemon.berth_ok(&[
        "exec",
        "p1",
        "--",
        "sh",
        "-c",
        "echo state > /home/user/notes; echo mem > /memory/fact; python3 -c \
         \"import socket; socket.create_connection(('api.example.test', 443), timeout=3)\" \
         2>/dev/null; true",
    ]);
    daemon.wait_for_box("p1", std::time::Duration::from_secs(60), |b| {
        b["state"] == "running"
    });

    let mut found = Vec::new();
    let root = fs::metadata(&data).unwrap();
    // The data dir may be searchable (0711: a box's mapped root traverses it to its own
    // dir), never listable.
    if loose(&root, 0o004) {
        found.push(format!(
            ". ({:o}, listable by other users)",
            root.mode() & 0o7777
        ));
    }
    exposed(&data, &data, loose(&root, 0o001), &mut found);
    assert!(
        found.is_empty(),
        "state open to other host users in {}:\n{}",
        data.display(),
        found.join("\n")
    );
}
