//! `berth cp -r` with a real daemon and real boxes (sandbox, and qemu where the host runs
//! it): a tree of 10,000 files with relative symlinks and varied modes goes into a box and
//! back out identical (path, type, mode, size, sha256 or link target), and the box itself
//! holds exactly that tree.
//!
//! Needs root, runc and berth-init (and for qemu, QEMU and the test images); otherwise
//! skips (`berth_testkit::skip`).

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

use common::*;
use sha2::{Digest, Sha256};

const DIRS: usize = 100;
const FILES_PER_DIR: usize = 100;
const MODES: [u32; 6] = [0o644, 0o600, 0o755, 0o640, 0o700, 0o444];

/// 100 directories of 100 files (10,000), each directory with two relative symlinks (one to
/// a file beside it, one to a file in another directory), an empty directory and one whose
/// mode leaves out the group and others.
fn make_tree(root: &Path) {
    for d in 0..DIRS {
        let dir = root.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            let i = d * FILES_PER_DIR + f;
            let path = dir.join(format!("f{f:03}"));
            // Mostly small files, a few of 100 KiB: varied content for the checksums.
            let len = if i % 997 == 0 { 100 * 1024 } else { i % 300 };
            let data: Vec<u8> = (0..len).map(|k| ((k * 31 + i) % 251) as u8).collect();
            fs::write(&path, data).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(MODES[i % MODES.len()])).unwrap();
        }
        symlink("f000", dir.join("near")).unwrap();
        symlink(format!("../d{:03}/f001", (d + 1) % DIRS), dir.join("far")).unwrap();
    }
    fs::create_dir(root.join("empty")).unwrap();
    fs::set_permissions(root.join("d007"), fs::Permissions::from_mode(0o700)).unwrap();
}

/// Relative path → (type, mode, size, sha256 or link target).
fn manifest(root: &Path) -> BTreeMap<String, (char, u32, u64, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for item in fs::read_dir(&dir).unwrap() {
            let path = item.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let mode = meta.mode() & 0o7777;
            let row = if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap();
                ('l', 0, 0, target.to_string_lossy().into_owned())
            } else if meta.is_dir() {
                stack.push(path.clone());
                ('d', mode, 0, String::new())
            } else {
                let sum = Sha256::digest(fs::read(&path).unwrap());
                let hex = sum.iter().fold(String::new(), |mut s, b| {
                    let _ = write!(s, "{b:02x}");
                    s
                });
                ('f', mode, meta.len(), hex)
            };
            out.insert(rel, row);
        }
    }
    out
}

/// The same manifest as the box's `find` and `sha256sum` print it, one line per entry.
fn listing(manifest: &BTreeMap<String, (char, u32, u64, String)>) -> String {
    let mut out = String::new();
    for (path, (kind, mode, size, what)) in manifest {
        match kind {
            'f' => writeln!(out, "f {path} {mode:o} {size}\nh {path} {what}").unwrap(),
            'd' => writeln!(out, "d {path} {mode:o}").unwrap(),
            _ => writeln!(out, "l {path} {what}").unwrap(),
        }
    }
    out
}

/// In the box: every entry under `$1` in [`listing`]'s form, sorted, as its sha256 (the
/// listing itself is too long for a collected exec's output). Few processes: a slow
/// (emulated) VM spends seconds on each thousand.
const BOX_LISTING: &str = r#"cd "$1" && {
  find . -mindepth 1 \( -type f -printf 'f %P %m %s\n' \) -o \( -type d -printf 'd %P %m\n' \) \
    -o \( -type l -printf 'l %P %l\n' \)
  find . -mindepth 1 -type f -exec sha256sum {} + | sed 's|^\([0-9a-f]*\)  \./\(.*\)$|h \2 \1|'
} | LC_ALL=C sort | sha256sum | cut -d' ' -f1"#;

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// Into box `name` and back out; the box's own view and the copy back both match.
fn round_trip(daemon: &Daemon, name: &str) {
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("tree");
    make_tree(&src);
    let expected = manifest(&src);
    assert_eq!(
        expected.values().filter(|r| r.0 == 'f').count(),
        DIRS * FILES_PER_DIR
    );

    let up = daemon.berth(&["cp", "-r", src.to_str().unwrap(), &format!("{name}:data")]);
    assert!(up.status.success(), "{}", stderr(&up));
    let summary = stderr(&up);
    assert!(
        summary.contains("copied 10000 files") && summary.contains("200 links"),
        "{summary}"
    );

    // `LC_ALL=C sort` orders by bytes, as `sort` on `String`s does.
    let mut sorted: Vec<String> = listing(&expected).lines().map(str::to_owned).collect();
    sorted.sort();
    let want = sha256_hex(&(sorted.join("\n") + "\n"));
    let in_box = daemon.berth_ok(&[
        "exec",
        name,
        "--",
        "sh",
        "-c",
        BOX_LISTING,
        "sh",
        "/home/user/data",
    ]);
    assert_eq!(
        in_box.trim(),
        want,
        "the box's tree differs from the source"
    );

    let back = work.path().join("back");
    let down = daemon.berth(&["cp", "-r", &format!("{name}:data"), back.to_str().unwrap()]);
    assert!(down.status.success(), "{}", stderr(&down));
    let got = manifest(&back);
    let missing: Vec<_> = expected
        .keys()
        .filter(|k| !got.contains_key(*k))
        .take(5)
        .collect();
    let differing: Vec<_> = expected
        .iter()
        .filter(|(k, v)| got.get(*k).is_some_and(|g| g != *v))
        .take(5)
        .collect();
    assert!(
        missing.is_empty() && differing.is_empty() && got.len() == expected.len(),
        "missing {missing:?}, differing {differing:?}, {} vs {} entries",
        got.len(),
        expected.len()
    );
    // An existing local directory takes the box directory's name inside it.
    let into = work.path().join("into");
    fs::create_dir(&into).unwrap();
    daemon.berth_ok(&[
        "cp",
        "-r",
        &format!("{name}:data/d001"),
        into.to_str().unwrap(),
    ]);
    assert_eq!(manifest(&into.join("d001")).len(), FILES_PER_DIR + 2);

    // Clear one-line errors.
    let out = daemon.berth(&["cp", "-r", &format!("{name}:nope"), back.to_str().unwrap()]);
    assert_one_line_error(&out, 1, &["nope"]);
    let out = daemon.berth(&[
        "cp",
        "-r",
        work.path().join("absent").to_str().unwrap(),
        &format!("{name}:x"),
    ]);
    assert_one_line_error(&out, 1, &["absent"]);
}

#[test]
fn end_to_end_cp_r_round_trip_on_a_sandbox_box() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    daemon.berth_ok(&["box", "create", "dirs"]);
    round_trip(&daemon, "dirs");
    daemon.berth_ok(&["box", "rm", "dirs"]);
}

#[test]
fn end_to_end_cp_r_round_trip_on_a_qemu_box() {
    if let Some(reason) = e2e_skip_reason() {
        berth_testkit::skip("sandbox", &reason);
        return;
    }
    let daemon = Daemon::start();
    if daemon.offer_qemu().is_none() {
        return;
    }
    daemon.berth_ok(&[
        "box",
        "create",
        "vmdirs",
        "--runtime",
        "qemu",
        "--template",
        "minimal",
    ]);
    round_trip(&daemon, "vmdirs");
    daemon.berth_ok(&["box", "rm", "vmdirs"]);
    assert!(
        vm_processes(daemon.dir()).is_empty(),
        "a VM process outlived its box"
    );
}
