//! A box's `/memory`, read without waking it (`berth memory NAME ls|cat`): a stopped box is
//! read from its volume image by the daemon's confined volume reader, and stays stopped with
//! its events untouched; a running box answers through its agent, the same tree and bytes.
//! A damaged image is refused with the reason, and the daemon and the box go on.
//!
//! Real parts: `berth up` on the sandbox runtime (runc, berth-init) and on qemu (TCG here),
//! the `berth` program confined as the reader. Needs root; skipped (and says so) otherwise.

mod common;

use std::fs;

use common::{assert_one_line_error, e2e_skip_reason, Daemon};

const WRITE_MEMORY: &str = "\
mkdir -p /memory/entities /memory/timeline/2026 && \
printf 'Alice likes [[tea]].\\n' > /memory/entities/alice.md && \
head -c 300000 /dev/zero | tr '\\0' 'x' > /memory/timeline/2026/12-04.md && \
ln -s /home/user/.bashrc /memory/escape";

/// What shows the box was not touched: its row's state and generation, and its events.
fn untouched_marks(daemon: &Daemon, name: &str) -> (String, String) {
    let shown: serde_json::Value =
        serde_json::from_str(&daemon.berth_ok(&["box", "show", name, "--json"])).unwrap();
    let row = format!("{} {}", shown["state"], shown["generation"]);
    (row, daemon.berth_ok(&["logs", name, "--json"]))
}

fn tree(daemon: &Daemon, name: &str) -> serde_json::Value {
    serde_json::from_str(&daemon.berth_ok(&["memory", name, "ls", "--json"])).unwrap()
}

fn paths(tree: &serde_json::Value) -> Vec<String> {
    tree["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_owned())
        .collect()
}

/// Writes memory in the running box `name`, stops it, and checks every read of the stopped
/// box: answered from the volume, the box untouched. Returns the tree's paths.
fn reads_of_a_stopped_box(daemon: &Daemon, name: &str) -> Vec<String> {
    daemon.berth_ok(&["exec", name, "--", "sh", "-c", WRITE_MEMORY]);
    daemon.berth_ok(&["box", "stop", name]);
    let before = untouched_marks(daemon, name);
    assert!(before.0.starts_with("\"stopped\""), "{}", before.0);

    let asleep = tree(daemon, name);
    assert_eq!(asleep["source"], "volume", "{asleep}");
    let listed = paths(&asleep);
    for want in [
        "README.md",
        "entities",
        "entities/alice.md",
        "escape",
        "timeline/2026/12-04.md",
    ] {
        assert!(listed.iter().any(|p| p == want), "{want} not in {listed:?}");
    }
    let escape = asleep["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "escape")
        .unwrap();
    assert_eq!(escape["kind"], "symlink");
    assert_eq!(escape["target"], "/home/user/.bashrc");
    assert_eq!(
        daemon.berth_ok(&["memory", name, "cat", "entities/alice.md"]),
        "Alice likes [[tea]].\n"
    );
    let big = daemon.berth_ok(&["memory", name, "cat", "/memory/timeline/2026/12-04.md"]);
    assert_eq!(big.len(), 300_000);
    let sub = tree_at(daemon, name, "timeline");
    assert_eq!(
        paths(&sub),
        [
            "timeline/2026",
            "timeline/2026/12-04.md",
            "timeline/README.md"
        ]
    );

    // Refusals say why, in one line.
    let missing = daemon.berth(&["memory", name, "cat", "entities/bob.md"]);
    assert_one_line_error(&missing, 1, &["does not exist"]);
    let link = daemon.berth(&["memory", name, "cat", "escape"]);
    assert_one_line_error(&link, 1, &["symlink", "never follow"]);
    let dir = daemon.berth(&["memory", name, "cat", "entities"]);
    assert_one_line_error(&dir, 1, &["directory"]);
    let up = daemon.berth(&["memory", name, "cat", "../home/user/.bashrc"]);
    assert_one_line_error(&up, 1, &[".."]);

    assert_eq!(
        untouched_marks(daemon, name),
        before,
        "reading its memory changed the stopped box"
    );
    listed
}

fn tree_at(daemon: &Daemon, name: &str, path: &str) -> serde_json::Value {
    serde_json::from_str(&daemon.berth_ok(&["memory", name, "ls", path, "--json"])).unwrap()
}

/// The same reads of the running box answer through its agent, with the same entries.
fn reads_of_a_running_box(daemon: &Daemon, name: &str, asleep: &[String]) {
    daemon.berth_ok(&["box", "start", name]);
    let awake = tree(daemon, name);
    assert_eq!(awake["source"], "box", "{awake}");
    assert_eq!(paths(&awake), asleep);
    assert!(awake["entries"][0]["modified"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(
        daemon.berth_ok(&["memory", name, "cat", "entities/alice.md"]),
        "Alice likes [[tea]].\n"
    );
    let link = daemon.berth(&["memory", name, "cat", "escape"]);
    assert_one_line_error(&link, 1, &["symlink", "never follow"]);
}

#[test]
fn a_stopped_sandbox_boxs_memory_is_read_from_its_volume_and_it_stays_stopped() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "mem"]);
    let asleep = reads_of_a_stopped_box(&daemon, "mem");
    reads_of_a_running_box(&daemon, "mem", &asleep);

    // Paused: its volume is frozen for the read (its writes reach the image first).
    daemon.berth_ok(&[
        "exec",
        "mem",
        "--",
        "sh",
        "-c",
        "echo fresh > /memory/fresh.md",
    ]);
    daemon.berth_ok(&["box", "pause", "mem"]);
    assert_eq!(
        daemon.berth_ok(&["memory", "mem", "cat", "fresh.md"]),
        "fresh\n"
    );
    let (row, _) = untouched_marks(&daemon, "mem");
    assert!(row.starts_with("\"paused\""), "{row}");
    daemon.berth_ok(&[
        "exec",
        "mem",
        "--",
        "sh",
        "-c",
        "echo after > /memory/after.md",
    ]);
    assert_eq!(
        daemon.berth_ok(&["memory", "mem", "cat", "after.md"]),
        "after\n"
    );
}

#[test]
fn a_stopped_qemu_boxs_memory_is_read_from_the_image_its_guest_wrote() {
    let Some(daemon) = Daemon::start_with_qemu_box("vm") else {
        return;
    };
    let asleep = reads_of_a_stopped_box(&daemon, "vm");
    reads_of_a_running_box(&daemon, "vm", &asleep);

    // A template's layout reaches a VM's berth-init through its config disk.
    fs::create_dir_all(daemon.dir().join("templates")).unwrap();
    fs::write(
        daemon.dir().join("templates/vmnotes.toml"),
        "name = \"vmnotes\"\nbase = \"minimal\"\n\n[memory]\nowner = \"Vera\"\nfolders = { log = \"What happened.\" }\n",
    )
    .unwrap();
    daemon.berth_ok(&["template", "reload"]);
    daemon.berth_ok(&[
        "box",
        "create",
        "vm2",
        "--runtime",
        "qemu",
        "--template",
        "vmnotes",
    ]);
    daemon.berth_ok(&["box", "start", "vm2"]);
    daemon.berth_ok(&["box", "stop", "vm2"]);
    assert_eq!(
        paths(&tree(&daemon, "vm2")),
        ["README.md", "log", "log/README.md"]
    );
    let readme = daemon.berth_ok(&["memory", "vm2", "cat", "README.md"]);
    assert!(
        readme.starts_with("# Persistent memory of [[Vera]]"),
        "{readme}"
    );
}

#[test]
fn a_damaged_volume_is_refused_with_the_reason_and_nothing_is_lost() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    let id = daemon
        .berth_ok(&["box", "create", "hurt"])
        .trim()
        .to_owned();
    daemon.berth_ok(&[
        "exec",
        "hurt",
        "--",
        "sh",
        "-c",
        "echo kept > /memory/kept.md",
    ]);
    daemon.berth_ok(&["box", "stop", "hurt"]);
    let image = daemon.dir().join("boxes").join(&id).join("volume.ext4");
    let clean = fs::read(&image).unwrap();
    // The superblock's magic (offset 1024 + 56) wiped: no longer an ext4 file system.
    let mut damaged = clean.clone();
    damaged[1024 + 56] = 0;
    damaged[1024 + 57] = 0;
    fs::write(&image, &damaged).unwrap();
    let refused = daemon.berth(&["memory", "hurt", "ls"]);
    assert_one_line_error(&refused, 1, &["volume image cannot be read"]);
    assert_eq!(
        fs::read(&image).unwrap(),
        damaged,
        "the reader wrote to the image"
    );

    fs::write(&image, &clean).unwrap();
    assert_eq!(
        daemon.berth_ok(&["memory", "hurt", "cat", "kept.md"]),
        "kept\n"
    );
    daemon.berth_ok(&["box", "start", "hurt"]);
    assert_eq!(
        daemon.berth_ok(&["exec", "hurt", "--", "cat", "/memory/kept.md"]),
        "kept\n"
    );
}

/// A template's `[memory]` seeds the box's first boot: the owner in `README.md`, its own
/// folders each with a one-line `README.md`; a box never started has an empty memory.
#[test]
fn a_templates_memory_layout_seeds_the_first_boot() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    fs::create_dir_all(daemon.dir().join("templates")).unwrap();
    fs::write(
        daemon.dir().join("templates/cook.toml"),
        "name = \"cook\"\n\n[memory]\nowner = \"Alice\"\nfolders = { recipes = \"One file per dish.\", pantry = \"What is in the cupboard.\" }\n",
    )
    .unwrap();
    daemon.berth_ok(&["template", "reload"]);
    daemon.berth_ok(&["box", "create", "chef", "--template", "cook"]);
    let never = tree(&daemon, "chef");
    assert_eq!(never["entries"], serde_json::json!([]), "{never}");
    let missing = daemon.berth(&["memory", "chef", "cat", "README.md"]);
    assert_one_line_error(&missing, 1, &["does not exist"]);

    daemon.berth_ok(&["box", "start", "chef"]);
    daemon.berth_ok(&["box", "stop", "chef"]);
    let seeded = tree(&daemon, "chef");
    assert_eq!(
        paths(&seeded),
        [
            "README.md",
            "pantry",
            "pantry/README.md",
            "recipes",
            "recipes/README.md"
        ]
    );
    let readme = daemon.berth_ok(&["memory", "chef", "cat", "README.md"]);
    assert!(
        readme.starts_with("# Persistent memory of [[Alice]]"),
        "{readme}"
    );
    assert!(
        readme.contains("- `recipes/`: One file per dish."),
        "{readme}"
    );
    assert_eq!(
        daemon.berth_ok(&["memory", "chef", "cat", "recipes/README.md"]),
        "One file per dish.\n"
    );

    // Seeded once: what the agent removes stays removed.
    daemon.berth_ok(&["exec", "chef", "--", "rm", "-r", "/memory/pantry"]);
    daemon.berth_ok(&["box", "stop", "chef"]);
    daemon.berth_ok(&["box", "start", "chef"]);
    assert!(!paths(&tree(&daemon, "chef")).iter().any(|p| p == "pantry"));

    // A bad layout is the template's error, with the reason.
    fs::write(
        daemon.dir().join("templates/bad.toml"),
        "name = \"bad\"\n\n[memory]\nfolders = { \"../up\" = \"no\" }\n",
    )
    .unwrap();
    let reloaded = daemon.berth(&["template", "reload"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&reloaded.stdout),
        String::from_utf8_lossy(&reloaded.stderr)
    );
    assert!(
        said.contains("memory") && said.contains("plain name"),
        "{said}"
    );
}
