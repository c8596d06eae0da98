//! A box's memory searched, linked and versioned from the host (`berth memory NAME
//! search|links|log|diff|restore|cat --at`): a stop takes a snapshot of what the box
//! wrote, a stopped box is searched without waking (its state and events unchanged), a
//! running box's search sees what it just wrote, and a restore brings back what the agent
//! deleted, keeping the state it replaced as a snapshot of its own.
//!
//! Real parts: `berth up` on the sandbox runtime (runc, berth-init) and on qemu (TCG
//! here), the `berth` program confined as the volume reader, a tantivy index and a chunk
//! store on disk. Needs root; skipped (and says so) otherwise.

mod common;

use common::{assert_one_line_error, e2e_skip_reason, Daemon};

const WRITE_MEMORY: &str = "\
mkdir -p /memory/entities /memory/timeline && \
printf 'Alice likes [[tea]] and met [[bob]] in Zanzibar.\\n' > /memory/entities/alice.md && \
printf 'Bob remembers [[alice]].\\n' > /memory/entities/bob.md && \
printf 'Flew to Zanzibar with Alice.\\n' > /memory/timeline/2026-12-05.md";

/// What shows the box was not touched: its row's state and generation, and its events.
fn untouched_marks(daemon: &Daemon, name: &str) -> (String, String) {
    let shown = json(&daemon.berth_ok(&["box", "show", name, "--json"]));
    let row = format!("{} {}", shown["state"], shown["generation"]);
    (row, daemon.berth_ok(&["logs", name, "--json"]))
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn snapshots(daemon: &Daemon, name: &str) -> Vec<serde_json::Value> {
    json(&daemon.berth_ok(&["memory", name, "log", "--json"]))["snapshots"]
        .as_array()
        .unwrap()
        .clone()
}

fn hit_paths(daemon: &Daemon, name: &str, words: &str) -> Vec<String> {
    let answer = json(&daemon.berth_ok(&["memory", name, "search", words, "--json"]));
    answer["hits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["path"].as_str().unwrap().to_owned())
        .collect()
}

/// The whole story on one box, whatever its runtime.
fn history_of(daemon: &Daemon, name: &str) {
    daemon.berth_ok(&["exec", name, "--", "sh", "-c", WRITE_MEMORY]);
    daemon.berth_ok(&["box", "stop", name]);

    // The stop took a snapshot of what the box wrote.
    let log = snapshots(daemon, name);
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["reason"], "stop");
    let first = log[0]["id"].as_str().unwrap().to_owned();

    // Searched, linked and read at a snapshot while stopped: the box stays as it was.
    let before = untouched_marks(daemon, name);
    assert!(before.0.starts_with("\"stopped\""), "{}", before.0);
    let hits = hit_paths(daemon, name, "zanzibar");
    assert_eq!(hits.len(), 2, "{hits:?}");
    assert!(hits.contains(&"entities/alice.md".to_owned()), "{hits:?}");
    let answer = json(&daemon.berth_ok(&["memory", name, "search", "zanzibar", "--json"]));
    let hit = &answer["hits"][0];
    let [start, end] = [0, 1].map(|i| hit["highlights"][0][i].as_u64().unwrap() as usize);
    assert_eq!(
        hit["snippet"].as_str().unwrap()[start..end].to_lowercase(),
        "zanzibar"
    );
    let links = json(&daemon.berth_ok(&["memory", name, "links", "entities/alice.md", "--json"]));
    let outgoing: Vec<(String, bool)> = links["outgoing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["target"].as_str().unwrap().to_owned(),
                l["exists"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        outgoing,
        [
            ("entities/tea.md".to_owned(), false),
            ("entities/bob.md".to_owned(), true)
        ]
    );
    assert_eq!(links["backlinks"], serde_json::json!(["entities/bob.md"]));
    assert_eq!(
        daemon.berth_ok(&["memory", name, "cat", "entities/bob.md", "--at", &first]),
        "Bob remembers [[alice]].\n"
    );
    assert_eq!(
        untouched_marks(daemon, name),
        before,
        "the host's reads changed the stopped box"
    );

    // Refusals say why, in one line.
    let empty = daemon.berth(&["memory", name, "search", " "]);
    assert_one_line_error(&empty, 1, &["no words"]);
    let nowhere = daemon.berth(&["memory", name, "links", "entities/carol.md"]);
    assert_one_line_error(&nowhere, 1, &["not a file"]);
    let unknown = daemon.berth(&["memory", name, "restore", "ms_000000000000001"]);
    assert_one_line_error(&unknown, 1, &["no memory snapshot"]);

    // Running: a search sees what the box just wrote, and no longer what it deleted.
    daemon.berth_ok(&["box", "start", name]);
    daemon.berth_ok(&[
        "exec",
        name,
        "--",
        "sh",
        "-c",
        "rm -rf /memory/entities && printf 'Quokka spotted.\\n' > /memory/timeline/quokka.md",
    ]);
    assert_eq!(hit_paths(daemon, name, "quokka"), ["timeline/quokka.md"]);
    assert_eq!(
        hit_paths(daemon, name, "zanzibar"),
        ["timeline/2026-12-05.md"]
    );

    // The agent deleted its entities: a restore brings them back, and the state it
    // replaces is a snapshot of its own.
    let restored = daemon.berth_ok(&["memory", name, "restore", &first]);
    assert!(
        restored.contains("the memory before is snapshot"),
        "{restored}"
    );
    let log = snapshots(daemon, name);
    let kept = log.last().unwrap();
    assert_eq!(kept["reason"], "before_restore", "{log:?}");
    let kept = kept["id"].as_str().unwrap().to_owned();
    let alice = daemon.berth_ok(&["exec", name, "--", "cat", "/memory/entities/alice.md"]);
    assert_eq!(alice, "Alice likes [[tea]] and met [[bob]] in Zanzibar.\n");
    let quokka = daemon.berth(&[
        "exec",
        name,
        "--",
        "test",
        "-e",
        "/memory/timeline/quokka.md",
    ]);
    assert!(
        !quokka.status.success(),
        "a whole-tree restore keeps only the snapshot's files"
    );
    // What the restore replaced can be read back and diffed.
    assert_eq!(
        daemon.berth_ok(&["memory", name, "cat", "timeline/quokka.md", "--at", &kept]),
        "Quokka spotted.\n"
    );
    let diff = json(&daemon.berth_ok(&["memory", name, "diff", &first, &kept, "--json"]));
    let changes: Vec<(String, String)> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_owned(),
                c["change"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        [
            ("entities/README.md".to_owned(), "removed".to_owned()),
            ("entities/alice.md".to_owned(), "removed".to_owned()),
            ("entities/bob.md".to_owned(), "removed".to_owned()),
            ("timeline/quokka.md".to_owned(), "added".to_owned()),
        ]
    );
    // One file's change as a patch.
    daemon.berth_ok(&[
        "exec",
        name,
        "--",
        "sh",
        "-c",
        "echo 'Bob moved to Oslo.' >> /memory/entities/bob.md",
    ]);
    daemon.berth_ok(&["box", "stop", name]);
    let patch = daemon.berth_ok(&["memory", name, "diff", &first, "--path", "entities/bob.md"]);
    assert!(patch.contains("+Bob moved to Oslo."), "{patch}");
    assert!(patch.contains("M entities/bob.md"), "{patch}");
}

#[test]
fn a_sandbox_boxs_memory_is_searched_linked_and_restored_from_the_host() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "hist"]);
    history_of(&daemon, "hist");
}

#[test]
fn a_qemu_boxs_memory_is_searched_linked_and_restored_from_the_host() {
    let Some(daemon) = Daemon::start_with_qemu_box("vmhist") else {
        return;
    };
    history_of(&daemon, "vmhist");
}

/// What the files below `dir` take on disk (their blocks), in bytes.
fn disk_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    let mut todo = vec![dir.to_owned()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).into_iter().flatten().flatten() {
            let meta = entry.metadata().unwrap();
            total += meta.blocks() * 512;
            if meta.is_dir() {
                todo.push(entry.path());
            }
        }
    }
    total
}

/// The measure on a real box: `stops` stops of a box whose 10 MiB memory has one
/// 4 KiB file changed before each, and the history on disk stays under twice the memory.
fn history_of_many_stops(daemon: &Daemon, name: &str, stops: usize) {
    // 160 files of 64 KiB of random bytes (compression cannot hide them) and the one that
    // changes.
    daemon.berth_ok(&[
        "exec",
        name,
        "--",
        "sh",
        "-c",
        "mkdir -p /memory/entities/bulk && for i in $(seq 1 160); do \
         head -c 65536 /dev/urandom > /memory/entities/bulk/$i.md; done",
    ]);
    let memory_bytes = 160 * 65536 + 4096;
    for _ in 0..stops {
        daemon.berth_ok(&[
            "exec",
            name,
            "--",
            "sh",
            "-c",
            "head -c 4096 /dev/urandom > /memory/timeline/today.md",
        ]);
        daemon.berth_ok(&["box", "stop", name]);
    }
    let log = snapshots(daemon, name);
    assert_eq!(
        log.len(),
        stops,
        "one snapshot per stop that changed the memory"
    );
    let stored = disk_bytes(&daemon.dir().join("memory-history"));
    eprintln!(
        "{stops} stops of a {memory_bytes}-byte memory, one 4 KiB file changed each: the history takes {stored} bytes on disk ({:.2}x)",
        stored as f64 / memory_bytes as f64
    );
    assert!(
        stored < 2 * memory_bytes,
        "the history takes {stored} bytes on disk, 2x the memory is {}",
        2 * memory_bytes
    );
}

#[test]
fn a_hundred_stops_of_a_sandbox_box_keep_its_history_under_twice_its_memory() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "many"]);
    history_of_many_stops(&daemon, "many", 100);
}

#[test]
fn ten_stops_of_a_qemu_box_keep_its_history_under_twice_its_memory() {
    // Ten, not a hundred: each stop is a boot of a TCG guest here (seconds each). The
    // hundred are measured on the sandbox, on the same code.
    let Some(daemon) = Daemon::start_with_qemu_box("vmmany") else {
        return;
    };
    history_of_many_stops(&daemon, "vmmany", 10);
}
