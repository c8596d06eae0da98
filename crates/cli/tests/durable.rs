//! Durable copies on one host (`[storage] url` a local directory): a box's volume is copied
//! when it stops and while it runs, and a lost or damaged image comes back whole from a
//! copy with `berth box restore NAME --from-copy`; a damaged copy is found, named, and
//! leaves the image as it was.
//!
//! Real parts: `berth up` on the sandbox runtime (runc, berth-init), the chunk store in a
//! directory. Needs root; skipped (and says so) otherwise.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{assert_one_line_error, e2e_skip_reason, Daemon};

const WITHIN: Duration = Duration::from_secs(60);

fn daemon_with_copies(store: &Path, sync_interval_s: u64) -> Daemon {
    Daemon::start_with_config(&format!(
        "[storage]\nurl = \"{}\"\nsync_interval_s = {sync_interval_s}\n",
        store.display()
    ))
}

/// The box's newest copy's generation (0: none yet).
fn generation(b: &serde_json::Value) -> u64 {
    b["durable"]["generation"].as_u64().unwrap_or(0)
}

fn sha_of(daemon: &Daemon, name: &str, path: &str) -> String {
    let out = daemon.berth_ok(&["exec", name, "--", "sha256sum", path]);
    out.split_whitespace().next().unwrap().to_string()
}

fn volume_of(daemon: &Daemon, id: &str) -> PathBuf {
    daemon.dir().join("boxes").join(id).join("volume.ext4")
}

fn chunk_files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.join("chunks")];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn a_lost_volume_comes_back_from_its_copy_and_a_damaged_copy_is_named() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let daemon = daemon_with_copies(store.path(), 0);
    let id = daemon
        .berth_ok(&["box", "create", "keep"])
        .trim()
        .to_string();
    daemon.berth_ok(&[
        "exec",
        "keep",
        "--",
        "sh",
        "-c",
        "head -c 3000000 /dev/urandom > /home/user/data.bin && echo notes > /memory/notes.md",
    ]);
    let want = sha_of(&daemon, "keep", "/home/user/data.bin");

    // A stop takes a copy.
    daemon.berth_ok(&["box", "stop", "keep"]);
    let shown = daemon.wait_for_box("keep", WITHIN, |b| generation(b) >= 1);
    assert!(
        shown["durable"]["stored_bytes"].as_u64().unwrap() > 0,
        "{shown}"
    );
    let first = generation(&shown);

    // The image is lost: the restore brings it back whole.
    fs::remove_file(volume_of(&daemon, &id)).unwrap();
    let restored = daemon.berth_ok(&["box", "restore", "keep", "--from-copy", "--json"]);
    let restored: serde_json::Value = serde_json::from_str(&restored).unwrap();
    assert_eq!(restored["state"], "stopped", "{restored}");
    let logs = daemon.berth_ok(&["logs", "keep", "--json"]);
    assert!(logs.contains("volume_restored"), "no restore event: {logs}");
    assert_eq!(sha_of(&daemon, "keep", "/home/user/data.bin"), want);
    assert_eq!(
        daemon.berth_ok(&["exec", "keep", "--", "cat", "/memory/notes.md"]),
        "notes\n"
    );

    // A running box is not restored under itself.
    let refused = daemon.berth(&["box", "restore", "keep", "--from-copy"]);
    assert_one_line_error(&refused, 1, &["running", "stop it first"]);

    // A copy with a flipped byte is found on restore, named, and the image is untouched.
    daemon.berth_ok(&["box", "stop", "keep"]);
    daemon.wait_for_box("keep", WITHIN, |b| generation(b) > first);
    let image = volume_of(&daemon, &id);
    let before = fs::read(&image).unwrap();
    let chunks = chunk_files(store.path());
    assert!(
        !chunks.is_empty(),
        "no chunks in {}",
        store.path().display()
    );
    for chunk in &chunks {
        let mut bytes = fs::read(chunk).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        fs::write(chunk, bytes).unwrap();
    }
    let refused = daemon.berth(&["box", "restore", "keep", "--from-copy"]);
    // Which chunk, of which copy, and what to do.
    assert_one_line_error(
        &refused,
        1,
        &[
            "cannot restore box keep",
            "chunk ",
            "is corrupt",
            "restore another generation",
        ],
    );
    assert!(
        fs::read(&image).unwrap() == before,
        "a failed restore changed the image"
    );
    // A deleted chunk is named as missing.
    fs::remove_file(&chunks[0]).unwrap();
    let refused = daemon.berth(&["box", "restore", "keep", "--from-copy"]);
    let err = common::stderr(&refused);
    assert!(
        err.contains("is corrupt") || err.contains("is missing"),
        "{err}"
    );
    assert!(
        fs::read(&image).unwrap() == before,
        "a failed restore changed the image"
    );
    // The box still starts on its own image.
    assert_eq!(sha_of(&daemon, "keep", "/home/user/data.bin"), want);
}

#[test]
fn a_running_box_is_copied_while_it_runs_and_a_generation_can_be_chosen() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let daemon = daemon_with_copies(store.path(), 1);
    daemon.berth_ok(&["box", "create", "live"]);
    daemon.berth_ok(&[
        "exec",
        "live",
        "--",
        "sh",
        "-c",
        "echo one > /home/user/a.txt",
    ]);
    // A copy at the stop holds a.txt; copies taken while the box runs again come after it
    // (one taken while it first ran may predate the write).
    daemon.berth_ok(&["box", "stop", "live"]);
    let stopped = generation(&daemon.wait_for_box("live", WITHIN, |b| generation(b) >= 1));
    daemon.berth_ok(&["exec", "live", "--", "true"]);
    // Copied while it runs (the sync interval is a second), the box running on.
    let shown = daemon.wait_for_box("live", WITHIN, |b| generation(b) > stopped);
    assert_eq!(shown["state"], "running", "{shown}");
    let with_one = generation(&shown);
    daemon.berth_ok(&[
        "exec",
        "live",
        "--",
        "sh",
        "-c",
        "echo two > /home/user/b.txt",
    ]);
    daemon.wait_for_box("live", WITHIN, |b| generation(b) > with_one);
    // The box was never held still for long: it still answers at once.
    assert_eq!(
        daemon.berth_ok(&["exec", "live", "--", "cat", "/home/user/b.txt"]),
        "two\n"
    );

    // Back to the copy before b.txt.
    daemon.berth_ok(&["box", "stop", "live"]);
    let gen = with_one.to_string();
    daemon.berth_ok(&[
        "box",
        "restore",
        "live",
        "--from-copy",
        "--generation",
        &gen,
    ]);
    assert_eq!(
        daemon.berth_ok(&["exec", "live", "--", "cat", "/home/user/a.txt"]),
        "one\n"
    );
    let gone = daemon.berth(&["exec", "live", "--", "test", "-e", "/home/user/b.txt"]);
    assert!(
        !gone.status.success(),
        "b.txt came back from a copy before it"
    );
}

#[test]
fn without_a_chunk_store_a_restore_says_how_to_get_one() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "plain"]);
    let refused = daemon.berth(&["box", "restore", "plain", "--from-copy"]);
    assert_one_line_error(&refused, 1, &["[storage] url"]);
    let shown = daemon.berth_ok(&["box", "show", "plain"]);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert!(shown["durable"].is_null(), "{shown}");
}

/// A VM box is held still for its copy by a pause (its volume is the guest's to freeze), and
/// goes on after: the copy restores whole.
#[test]
fn a_running_qemu_box_is_copied_paused_and_goes_on() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let daemon = daemon_with_copies(store.path(), 5);
    if daemon.offer_qemu().is_none() {
        return;
    }
    daemon.berth_ok(&[
        "box",
        "create",
        "vm",
        "--runtime",
        "qemu",
        "--template",
        "minimal",
    ]);
    daemon.berth_ok(&[
        "exec",
        "vm",
        "--",
        "sh",
        "-c",
        "echo vm > /home/user/vm.txt",
    ]);
    // A copy at the stop holds the file; the box then runs again, and the copies taken while
    // it runs come after that one (a running copy taken before the write could not be told
    // from one after it).
    daemon.berth_ok(&["box", "stop", "vm"]);
    let stopped = generation(&daemon.wait_for_box("vm", WITHIN, |b| generation(b) >= 1));
    daemon.berth_ok(&["exec", "vm", "--", "true"]);
    // TCG guests are slow: their deadline scales.
    let shown = daemon.wait_for_box("vm", WITHIN * 4, |b| generation(b) > stopped);
    assert_eq!(
        shown["state"], "running",
        "left paused after its copy: {shown}"
    );
    assert_eq!(
        daemon.berth_ok(&["exec", "vm", "--", "cat", "/home/user/vm.txt"]),
        "vm\n"
    );
    let logs = daemon.logs();
    assert!(logs.contains("staged_ms"), "{logs}");

    // The running copy restores whole (what a power cut at the copy would have left,
    // recovered by the guest's ext4 journal).
    let gen = generation(&shown).to_string();
    daemon.berth_ok(&["box", "stop", "vm"]);
    daemon.berth_ok(&["box", "restore", "vm", "--from-copy", "--generation", &gen]);
    assert_eq!(
        daemon.berth_ok(&["exec", "vm", "--", "cat", "/home/user/vm.txt"]),
        "vm\n"
    );
}
