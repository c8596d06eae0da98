//! A whole box as one file and back (`berth backup`, `berth restore`): backed up while it
//! runs and while stopped, deleted, and restored byte for byte (its volume image, its
//! memory and its memory history), on its own runtime and on another; an archive with a
//! flipped byte, cut short, with a `../` name, or with a changed entry is refused with the
//! reason and nothing is created; scheduled backups keep the newest N.
//!
//! Real parts: `berth up` on the sandbox runtime (runc, berth-init) and on qemu (TCG
//! here), the chunk store in the data dir. Needs root; skipped (and says so) otherwise.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{assert_one_line_error, e2e_skip_reason, stderr, Daemon};
use sha2::{Digest, Sha256};

const WRITE: &str = "\
printf 'kept across the backup\\n' > /home/user/notes.txt && \
head -c 2000000 /dev/urandom > /home/user/data.bin && \
mkdir -p /memory/entities && printf 'Alice likes [[tea]].\\n' > /memory/entities/alice.md";
const CHANGE: &str = "printf 'Alice moved to Oslo.\\n' >> /memory/entities/alice.md";

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn box_id(daemon: &Daemon, name: &str) -> String {
    json(&daemon.berth_ok(&["box", "show", name, "--json"]))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn state(daemon: &Daemon, name: &str) -> String {
    json(&daemon.berth_ok(&["box", "show", name, "--json"]))["state"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn sha256_file(path: &Path) -> String {
    let mut file = fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    format!("{:x}", hasher.finalize())
}

/// Everything a restore must give back as it was: the image's bytes, the memory history
/// (ids, times, trees) and a memory file read at each snapshot.
#[derive(Debug, PartialEq)]
struct Kept {
    image: String,
    history: serde_json::Value,
    alice_at: Vec<String>,
}

fn kept(daemon: &Daemon, name: &str) -> Kept {
    let id = box_id(daemon, name);
    let image = daemon.dir().join("boxes").join(&id).join("volume.ext4");
    let history = json(&daemon.berth_ok(&["memory", name, "log", "--json"]))["snapshots"].clone();
    let alice_at = history
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let at = s["id"].as_str().unwrap();
            daemon.berth_ok(&["memory", name, "cat", "entities/alice.md", "--at", at])
        })
        .collect();
    Kept {
        image: sha256_file(&image),
        history,
        alice_at,
    }
}

/// What a refused restore must not have made: a box, a box directory, history records,
/// or scratch files.
fn made_things(daemon: &Daemon) -> (String, Vec<String>) {
    let boxes = daemon.berth_ok(&["box", "ls", "--json"]);
    let mut files = Vec::new();
    for dir in ["boxes", "memory-history/memory/boxes", "backups/incoming"] {
        for entry in fs::read_dir(daemon.dir().join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            files.push(format!("{dir}/{}", entry.file_name().to_string_lossy()));
        }
    }
    files.sort();
    (boxes, files)
}

/// The archive's tar, decompressed.
fn unpacked(archive: &Path) -> Vec<u8> {
    let mut tar = Vec::new();
    zstd::Decoder::new(fs::File::open(archive).unwrap())
        .unwrap()
        .read_to_end(&mut tar)
        .unwrap();
    tar
}

fn packed(tar: &[u8], to: &Path) {
    let mut out = zstd::Encoder::new(fs::File::create(to).unwrap(), 3).unwrap();
    out.include_checksum(true).unwrap();
    out.write_all(tar).unwrap();
    out.finish().unwrap();
}

/// A tar of the archive's entries with `entries` changed by `edit` (name, data).
fn rebuilt(archive: &Path, to: &Path, edit: impl Fn(&mut Vec<(Vec<u8>, Vec<u8>)>)) {
    let tar = unpacked(archive);
    let mut entries = Vec::new();
    for entry in tar::Archive::new(&tar[..]).entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path_bytes().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        entries.push((name, data));
    }
    edit(&mut entries);
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in &entries {
        // Written by hand: the tar crate's own path setters refuse `..`, as an attacker's
        // tool would not.
        let mut header = tar::Header::new_ustar();
        header.as_ustar_mut().unwrap().name[..name.len()].copy_from_slice(name);
        header.set_size(data.len() as u64);
        header.set_mode(0o600);
        header.set_entry_type(tar::EntryType::Regular);
        header.set_cksum();
        builder.append(&header, &data[..]).unwrap();
    }
    packed(&builder.into_inner().unwrap(), to);
}

/// Each broken archive is refused with its reason, and nothing is made.
fn broken_archives_are_refused(daemon: &Daemon, good: &Path, scratch: &Path) {
    let before = made_things(daemon);
    let bytes = fs::read(good).unwrap();

    let flipped = scratch.join("flipped.tar.zst");
    let mut changed = bytes.clone();
    let at = changed.len() / 2;
    changed[at] ^= 0x40;
    fs::write(&flipped, &changed).unwrap();

    let cut = scratch.join("cut.tar.zst");
    fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();

    let escape = scratch.join("escape.tar.zst");
    rebuilt(good, &escape, |entries| {
        entries.insert(1, (b"../escape".to_vec(), b"outside".to_vec()));
    });

    let tampered = scratch.join("tampered.tar.zst");
    rebuilt(good, &tampered, |entries| {
        let data = entries
            .iter_mut()
            .find(|(name, _)| name == b"volume/data")
            .expect("the backup holds volume/data");
        let at = data.1.len() / 3;
        data.1[at] ^= 0x01;
    });

    for (file, why) in [
        (&flipped, "damaged"),
        (&cut, "cut short"),
        (&escape, "\"../escape\""),
        (&tampered, "volume/data does not match the manifest"),
    ] {
        let out = daemon.berth(&["restore", file.to_str().unwrap(), "--name", "other"]);
        assert_one_line_error(&out, 1, &["refused", why, "nothing was created"]);
        assert_eq!(
            made_things(daemon),
            before,
            "{}: something was made",
            file.display()
        );
    }
    assert!(
        !scratch.join("escape").exists() && !daemon.dir().join("escape").exists(),
        "an entry reached outside the restore's directory"
    );
}

/// Backs up `name` (running, then stopped), checks refusals, deletes it, restores it on
/// its runtime and on `other` (runtime, template), and checks each is the same box.
fn round_trip(daemon: &Daemon, name: &str, other: Option<(&str, &str)>) {
    let scratch = tempfile::tempdir().unwrap();
    daemon.berth_ok(&["exec", name, "--", "sh", "-c", WRITE]);
    daemon.berth_ok(&["box", "stop", name]);
    daemon.berth_ok(&["box", "start", name]);
    daemon.berth_ok(&["exec", name, "--", "sh", "-c", CHANGE]);

    // While it runs: held still for its staging only, and running after.
    let running = scratch.path().join("running.tar.zst");
    daemon.berth_ok(&["backup", name, "-o", running.to_str().unwrap()]);
    assert_eq!(state(daemon, name), "running");
    let notes = daemon.berth_ok(&["exec", name, "--", "cat", "/home/user/notes.txt"]);
    assert_eq!(notes, "kept across the backup\n");

    daemon.berth_ok(&["box", "stop", name]);
    let want = kept(daemon, name);
    assert_eq!(want.history.as_array().unwrap().len(), 2, "{want:?}");
    let file = scratch.path().join("box.tar.zst");
    daemon.berth_ok(&["backup", name, "-o", file.to_str().unwrap()]);
    assert_eq!(state(daemon, name), "stopped");

    broken_archives_are_refused(daemon, &file, scratch.path());
    // The name is taken while the box lives: refused before anything is made.
    let before = made_things(daemon);
    let taken = daemon.berth(&["restore", file.to_str().unwrap()]);
    assert_one_line_error(&taken, 1, &[name]);
    assert_eq!(made_things(daemon), before);
    // A tenant with no room for another box: refused before the volume is read.
    let tenant = format!("{name}-full");
    daemon.berth_ok(&["tenant", "create", &tenant, "--max-boxes", "0"]);
    let before = made_things(daemon);
    let full = daemon.berth(&["restore", file.to_str().unwrap(), "--tenant", &tenant]);
    assert_one_line_error(&full, 1, &["quota", "max_boxes"]);
    assert_eq!(made_things(daemon), before);

    let old_id = box_id(daemon, name);
    daemon.berth_ok(&["box", "rm", name]);
    let restored = daemon.berth_ok(&["restore", file.to_str().unwrap()]);
    assert_eq!(restored.trim(), name);
    assert_ne!(box_id(daemon, name), old_id, "a restore makes a new box");
    assert_eq!(state(daemon, name), "stopped");
    assert_eq!(kept(daemon, name), want, "the restored box differs");
    let notes = daemon.berth_ok(&["exec", name, "--", "cat", "/home/user/notes.txt"]);
    assert_eq!(notes, "kept across the backup\n");

    // Through a pipe: `berth backup NAME -o - | berth restore -`.
    daemon.berth_ok(&["box", "stop", name]);
    let out = daemon.berth(&["backup", name, "-o", "-"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let piped = format!("{name}-piped");
    let restored = daemon.berth_with(&["restore", "-", "--name", &piped], Some(&out.stdout), &[]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert_eq!(kept(daemon, &piped).history, kept(daemon, name).history);
    daemon.berth_ok(&["box", "rm", &piped]);

    let Some((other_runtime, template)) = other else {
        daemon.berth_ok(&["box", "rm", name]);
        return;
    };
    // The same file on another runtime.
    let other = format!("{name}-on-{other_runtime}");
    daemon.berth_ok(&[
        "restore",
        file.to_str().unwrap(),
        "--name",
        &other,
        "--runtime",
        other_runtime,
        "--template",
        template,
    ]);
    let shown = json(&daemon.berth_ok(&["box", "show", &other, "--json"]));
    assert_eq!(shown["runtime"], other_runtime);
    assert_eq!(
        kept(daemon, &other),
        want,
        "the box restored on {other_runtime} differs"
    );
    let alice = daemon.berth_ok(&["exec", &other, "--", "cat", "/memory/entities/alice.md"]);
    assert_eq!(alice, "Alice likes [[tea]].\nAlice moved to Oslo.\n");
    for b in [name, other.as_str()] {
        daemon.berth_ok(&["box", "rm", b]);
    }
}

#[test]
fn a_sandbox_box_comes_back_whole_from_its_backup() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "keep"]);
    round_trip(&daemon, "keep", None);
}

#[test]
fn a_qemu_box_comes_back_whole_from_its_backup_on_the_sandbox() {
    let Some(daemon) = Daemon::start_with_qemu_box("vmkeep") else {
        return;
    };
    round_trip(&daemon, "vmkeep", Some(("sandbox", "minimal")));
}

/// The scheduled backups of the box with id `id`, oldest first.
fn scheduled(dir: &Path, id: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir.join(id))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".tar.zst"))
        .collect();
    files.sort_by_key(|p| fs::metadata(p).and_then(|m| m.modified()).unwrap());
    files
}

fn wait_for(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn scheduled_backups_keep_the_newest_and_restore() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let backups = tempfile::tempdir().unwrap();
    let daemon = Daemon::start_with_config(&format!(
        "[backup]\ndir = \"{}\"\ninterval_s = 1\nkeep = 2\n",
        backups.path().display()
    ));
    let id = daemon
        .berth_ok(&["box", "create", "sched"])
        .trim()
        .to_owned();
    let within = Duration::from_secs(120);
    let mut newest = None;
    for round in 1..=3 {
        daemon.berth_ok(&[
            "exec",
            "sched",
            "--",
            "sh",
            "-c",
            &format!("echo round {round} > /memory/round.md"),
        ]);
        daemon.berth_ok(&["box", "stop", "sched"]);
        // The newest backup comes to hold this round (every backup taken after the write
        // does, and the stop is a change a later one takes).
        let wanted = format!("round {round}\n");
        wait_for("a backup that holds this round", within, || {
            let Some(last) = scheduled(backups.path(), &id).pop() else {
                return false;
            };
            let tar = unpacked(&last);
            let holds = tar.windows(wanted.len()).any(|w| w == wanted.as_bytes());
            newest = Some(last);
            holds
        });
    }
    let files = scheduled(backups.path(), &id);
    assert_eq!(files.len(), 2, "keep = 2 keeps two: {files:?}");
    use std::os::unix::fs::PermissionsExt as _;
    for (path, mode) in [(backups.path().join(&id), 0o700), (files[1].clone(), 0o600)] {
        let got = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            got,
            mode,
            "{} is {got:o}: a backup holds all of a box",
            path.display()
        );
    }
    assert!(
        fs::read_dir(backups.path().join(&id))
            .unwrap()
            .flatten()
            .all(|e| !e.file_name().to_string_lossy().ends_with(".partial")),
        "a partial backup was left"
    );
    // The newest restores, with the last round in its memory.
    let restored = daemon.berth(&[
        "restore",
        newest.unwrap().to_str().unwrap(),
        "--name",
        "again",
    ]);
    assert!(restored.status.success(), "{}", stderr(&restored));
    assert_eq!(
        daemon.berth_ok(&["memory", "again", "cat", "round.md"]),
        "round 3\n"
    );
    for b in ["sched", "again"] {
        daemon.berth_ok(&["box", "rm", b]);
    }
}
