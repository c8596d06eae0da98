use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;

use berth_protocol::guest::{BoxUser, FileQuery};
use tar::{EntryType, Header};

use super::*;
use crate::error::ApiError;

/// One tar entry with exactly these name and link bytes (the `tar` crate's own setters
/// refuse the names under test).
fn raw_entry(kind: EntryType, name: &str, link: &str, data: &[u8]) -> Vec<u8> {
    let mut header = Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    header.set_mtime(1_700_000_000);
    let bytes = header.as_mut_bytes();
    bytes[..name.len()].copy_from_slice(name.as_bytes());
    bytes[157..157 + link.len()].copy_from_slice(link.as_bytes());
    header.set_cksum();
    let mut out = header.as_bytes().to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().next_multiple_of(512), 0);
    out
}

fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out = entries.concat();
    out.extend_from_slice(&[0; 1024]);
    out
}

fn extract(target: &Path, user: BoxUser, tar: Vec<u8>) -> Result<ArchiveWritten, ApiError> {
    let (tx, rx) = mpsc::channel(4);
    let q = FileQuery {
        path: target.to_string_lossy().into_owned(),
        user,
        ..Default::default()
    };
    // The bridge the server uses, on a runtime of the test's own.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let input =
        SyncIoBridge::new_with_handle(StreamReader::new(body_stream(rx)), runtime.handle().clone());
    let worker = std::thread::spawn(move || write(&q, input));
    for piece in tar.chunks(1000) {
        if tx
            .blocking_send(Chunk::Data(Bytes::copy_from_slice(piece)))
            .is_err()
        {
            break;
        }
    }
    let _ = tx.blocking_send(Chunk::End);
    drop(tx);
    worker.join().unwrap()
}

/// A target and a sibling directory that must stay untouched.
struct Scene {
    _dir: tempfile::TempDir,
    target: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    let outside = dir.path().join("outside");
    fs::create_dir(&target).unwrap();
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("secret"), b"s").unwrap();
    Scene {
        _dir: dir,
        target,
        outside,
    }
}

fn refused(result: Result<ArchiveWritten, ApiError>, entry: &str) {
    match result {
        Err(err @ ApiError::UnsafeEntry { .. }) => {
            assert_eq!(err.status(), http::StatusCode::BAD_REQUEST);
            assert_eq!(err.code(), berth_protocol::ErrorCode::InvalidRequest);
            assert!(err.to_string().contains(entry), "{err}");
        }
        other => panic!("{entry}: expected a refusal, got {other:?}"),
    }
}

fn outside_untouched(s: &Scene) {
    let names: Vec<_> = fs::read_dir(&s.outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["secret"]);
    assert_eq!(fs::read(s.outside.join("secret")).unwrap(), b"s");
}

#[test]
fn a_name_with_dot_dot_is_refused() {
    let s = scene();
    let tar = archive(&[raw_entry(EntryType::Regular, "../outside/x", "", b"evil")]);
    refused(extract(&s.target, BoxUser::Root, tar), "../outside/x");
    outside_untouched(&s);
    let tar = archive(&[raw_entry(EntryType::Regular, "a/../../outside/y", "", b"e")]);
    refused(extract(&s.target, BoxUser::Root, tar), "a/../../outside/y");
    outside_untouched(&s);
}

#[test]
fn an_absolute_name_is_refused() {
    let s = scene();
    let name = format!("{}/x", s.outside.display());
    let tar = archive(&[raw_entry(EntryType::Regular, &name, "", b"evil")]);
    refused(extract(&s.target, BoxUser::Root, tar), &name);
    outside_untouched(&s);
}

#[test]
fn a_symlink_out_then_a_file_through_it_is_refused() {
    let s = scene();
    for link in ["../outside", s.outside.to_str().unwrap(), "a/../../outside"] {
        let tar = archive(&[
            raw_entry(EntryType::Symlink, "evil", link, b""),
            raw_entry(EntryType::Regular, "evil/x", "", b"evil"),
        ]);
        refused(extract(&s.target, BoxUser::Root, tar), "evil");
        assert!(fs::symlink_metadata(s.target.join("evil")).is_err());
        outside_untouched(&s);
    }
}

#[test]
fn a_symlink_already_in_the_box_is_never_followed() {
    let s = scene();
    symlink(&s.outside, s.target.join("planted")).unwrap();
    let tar = archive(&[raw_entry(EntryType::Regular, "planted/x", "", b"evil")]);
    refused(extract(&s.target, BoxUser::Root, tar), "planted/x");
    outside_untouched(&s);
    // A symlink inside the archive to a directory inside, then a file through it: the
    // extraction still never walks through a link.
    let tar = archive(&[
        raw_entry(EntryType::Directory, "d", "", b""),
        raw_entry(EntryType::Symlink, "l", "d", b""),
        raw_entry(EntryType::Regular, "l/x", "", b"x"),
    ]);
    refused(extract(&s.target, BoxUser::Root, tar), "l/x");
    // A file named like the planted link replaces the link, not what it points at.
    symlink(s.outside.join("secret"), s.target.join("to-secret")).unwrap();
    let tar = archive(&[raw_entry(EntryType::Regular, "to-secret", "", b"new")]);
    extract(&s.target, BoxUser::Root, tar).unwrap();
    assert_eq!(fs::read(s.target.join("to-secret")).unwrap(), b"new");
    assert!(fs::symlink_metadata(s.target.join("to-secret"))
        .unwrap()
        .is_file());
    outside_untouched(&s);
}

#[test]
fn a_hard_link_to_outside_is_refused() {
    let s = scene();
    for source in [
        "../outside/secret".to_owned(),
        format!("{}/secret", s.outside.display()),
    ] {
        let tar = archive(&[raw_entry(EntryType::Link, "h", &source, b"")]);
        refused(extract(&s.target, BoxUser::Root, tar), "h");
        assert!(fs::symlink_metadata(s.target.join("h")).is_err());
        outside_untouched(&s);
    }
    // Through a planted symlink to a directory outside: refused too.
    symlink(&s.outside, s.target.join("planted")).unwrap();
    let tar = archive(&[raw_entry(EntryType::Link, "h", "planted/secret", b"")]);
    refused(extract(&s.target, BoxUser::Root, tar), "h");
    assert_eq!(fs::metadata(s.outside.join("secret")).unwrap().nlink(), 1);
}

#[test]
fn a_huge_long_name_record_is_refused_without_being_read_whole() {
    let s = scene();
    let long = vec![b'a'; 200 * 1024];
    let mut header = Header::new_gnu();
    header.set_entry_type(EntryType::GNULongName);
    header.set_size(long.len() as u64);
    header.as_mut_bytes()[..13].copy_from_slice(b"././@LongLink");
    header.set_cksum();
    let mut entry = header.as_bytes().to_vec();
    entry.extend_from_slice(&long);
    let err = extract(&s.target, BoxUser::Root, archive(&[entry])).unwrap_err();
    assert!(matches!(err, ApiError::UnsupportedEntry { .. }), "{err}");
}

#[test]
fn garbage_is_not_an_archive() {
    let s = scene();
    let err = extract(&s.target, BoxUser::Root, vec![b'x'; 2048]).unwrap_err();
    assert!(matches!(err, ApiError::BadArchive(_)), "{err}");
    assert_eq!(err.status(), http::StatusCode::BAD_REQUEST);
}

/// Path → (kind, mode, size, content or link target).
fn manifest(root: &Path) -> BTreeMap<String, (char, u32, u64, Vec<u8>)> {
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
            let entry = if meta.is_dir() {
                stack.push(path.clone());
                ('d', mode, 0, Vec::new())
            } else if meta.file_type().is_symlink() {
                let target = fs::read_link(&path).unwrap();
                ('l', 0, 0, target.to_string_lossy().as_bytes().to_vec())
            } else if meta.is_file() {
                ('f', mode, meta.len(), fs::read(&path).unwrap())
            } else {
                ('o', mode, 0, Vec::new())
            };
            out.insert(rel, entry);
        }
    }
    out
}

/// The tests that take archive transfer slots (the process's one [`super::TRANSFERS`]) run
/// one at a time: the cap test holds every slot for a while, and another test's transfer
/// would be refused meanwhile.
static TRANSFER_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn pack_to_vec(path: &Path, user: BoxUser) -> Vec<u8> {
    let _one_at_a_time = TRANSFER_TESTS.blocking_lock();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut rx = read(FileQuery {
            path: path.to_string_lossy().into_owned(),
            user,
            ..Default::default()
        })
        .await
        .unwrap();
        let mut out = Vec::new();
        while let Some(chunk) = rx.next().await {
            out.extend_from_slice(&chunk.unwrap());
        }
        out
    })
}

#[test]
fn a_tree_goes_out_and_back_in_identical() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    fs::create_dir_all(src.join("a/b/c")).unwrap();
    fs::write(src.join("plain"), b"hello").unwrap();
    fs::write(src.join("a/script"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(src.join("a/script"), fs::Permissions::from_mode(0o750)).unwrap();
    fs::write(src.join("a/b/c/big"), vec![7u8; 300 * 1024]).unwrap();
    fs::write(src.join("a/b/empty"), b"").unwrap();
    let long = "n".repeat(150);
    fs::write(src.join(&long), b"long name").unwrap();
    symlink("../plain", src.join("a/up")).unwrap();
    symlink("b/c/big", src.join("a/down")).unwrap();
    symlink(&long, src.join("to-long")).unwrap();
    fs::create_dir(src.join("locked")).unwrap();
    fs::write(src.join("locked/inside"), b"i").unwrap();
    fs::set_permissions(src.join("locked"), fs::Permissions::from_mode(0o555)).unwrap();
    // Left out: a FIFO.
    let fifo = std::ffi::CString::new(src.join("fifo").to_string_lossy().as_bytes()).unwrap();
    // SAFETY: mkfifo(3) with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);

    let tar = pack_to_vec(&src, BoxUser::Root);
    let dst = dir.path().join("dst/new");
    let written = extract(&dst, BoxUser::Root, tar).unwrap();
    let mut expected = manifest(&src);
    expected.remove("fifo");
    assert_eq!(manifest(&dst), expected);
    assert_eq!(written.files, 6);
    assert_eq!(written.links, 3);
    assert_eq!(
        fs::metadata(dst.join("a/script")).unwrap().mtime(),
        fs::metadata(src.join("a/script")).unwrap().mtime()
    );
    fs::set_permissions(dst.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();

    // One file: one entry, named by the file's own name.
    let tar = pack_to_vec(&src.join("plain"), BoxUser::Root);
    let one = dir.path().join("one");
    extract(&one, BoxUser::Root, tar).unwrap();
    assert_eq!(fs::read(one.join("plain")).unwrap(), b"hello");
    fs::set_permissions(src.join("locked"), fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn the_box_user_gets_no_setuid_bits_and_owns_what_it_extracts() {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let target = dir.path().join("t");
    fs::create_dir(&target).unwrap();
    std::os::unix::fs::chown(&target, Some(1001), Some(1001)).unwrap();
    let mut entry = raw_entry(EntryType::Regular, "suid", "", b"x");
    let mut header = Header::from_byte_slice(&entry[..512]).clone();
    header.set_mode(0o4755);
    header.set_cksum();
    entry[..512].copy_from_slice(header.as_bytes());
    extract(&target, BoxUser::User, archive(&[entry])).unwrap();
    let meta = fs::metadata(target.join("suid")).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o755);
    assert_eq!(meta.uid(), 1001);
    // The box user cannot extract into root's directory.
    let root_only = dir.path().join("root-only");
    fs::create_dir(&root_only).unwrap();
    fs::set_permissions(&root_only, fs::Permissions::from_mode(0o755)).unwrap();
    let tar = archive(&[raw_entry(EntryType::Regular, "f", "", b"x")]);
    let err = extract(&root_only, BoxUser::User, tar).unwrap_err();
    assert_eq!(
        err.code(),
        berth_protocol::ErrorCode::PermissionDenied,
        "{err}"
    );
}

#[tokio::test]
async fn transfers_past_the_cap_are_refused_until_one_ends() {
    let _one_at_a_time = TRANSFER_TESTS.lock().await;
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("big"), vec![0u8; 2 * 1024 * 1024]).unwrap();
    let q = FileQuery {
        path: dir.path().to_string_lossy().into_owned(),
        user: BoxUser::Root,
        ..Default::default()
    };
    // Nobody reads these: each worker waits with its channel full. The cap is the
    // process's (other code in this process may hold slots too): fill it until refused.
    let mut held = Vec::new();
    let err = loop {
        match read(q.clone()).await {
            Ok(rx) => held.push(rx),
            Err(err) => break err,
        }
        assert!(held.len() <= 16, "more than 16 transfers at once");
    };
    assert_eq!(
        err.code(),
        berth_protocol::ErrorCode::TooManyRequests,
        "{err}"
    );
    assert!(!held.is_empty(), "{err}");
    // A client that leaves frees its slot (its worker notices at its next send).
    held.pop();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match read(q.clone()).await {
            Ok(rx) => break held.push(rx),
            Err(err) => {
                assert!(std::time::Instant::now() < deadline, "still {err}");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}
