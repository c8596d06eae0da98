//! The file calls on the real agent: round trips as each user, what the box user may not
//! touch, archives.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use berth_protocol::guest::{BoxUser, ExecRequest, FileKind, FileQuery, WriteMode, BOX_USER_UID};
use berth_protocol::ErrorCode;
use berth_runtime::{GuestClient, GuestError};
use bytes::Bytes;

use super::common::{remote_code, run, Agent};

#[tokio::test]
async fn files_round_trip_as_the_box_user() {
    let agent = Agent::start();
    let c = &agent.client;
    let user = BoxUser::User;
    c.write_file(
        &agent.query("notes.txt", user),
        Bytes::from_static(b"hello"),
    )
    .await
    .unwrap();
    assert_eq!(
        c.read_file(&agent.query("notes.txt", user)).await.unwrap(),
        "hello"
    );
    let meta = std::fs::metadata(agent.home().join("notes.txt")).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o777),
        (BOX_USER_UID, BOX_USER_UID, 0o644)
    );
    let stat = c.stat(&agent.query("notes.txt", user)).await.unwrap();
    assert_eq!(
        (stat.name.as_str(), stat.kind, stat.size, stat.mode),
        ("notes.txt", FileKind::File, 5, 0o644)
    );
    let script = FileQuery {
        mode: Some(0o755),
        ..agent.query("run.sh", user)
    };
    c.write_file(&script, Bytes::from_static(b"#!/bin/sh\necho ran\n"))
        .await
        .unwrap();
    assert_eq!(c.stat(&script).await.unwrap().mode, 0o755);
    let out = run(
        c,
        ExecRequest {
            argv: vec!["./run.sh".into()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(out.stdout, b"ran\n");

    let deep = FileQuery {
        recursive: true,
        ..agent.query("a/b/c", user)
    };
    c.mkdir(&deep).await.unwrap();
    let (status, code) = remote_code(c.mkdir(&agent.query("a/b/c", user)).await.unwrap_err());
    assert_eq!((status, code), (409, ErrorCode::AlreadyExists));
    let list = c.list_files(&agent.query("", user)).await.unwrap();
    let names: Vec<_> = list
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.kind))
        .collect();
    assert_eq!(
        names,
        [
            ("a", FileKind::Dir),
            ("notes.txt", FileKind::File),
            ("run.sh", FileKind::File)
        ]
    );
    let (status, code) = remote_code(c.remove(&agent.query("a", user)).await.unwrap_err());
    assert_eq!((status, code), (409, ErrorCode::NotEmpty));
    c.remove(&FileQuery {
        recursive: true,
        ..agent.query("a", user)
    })
    .await
    .unwrap();
    c.remove(&agent.query("notes.txt", user)).await.unwrap();
    let (status, code) = remote_code(
        c.read_file(&agent.query("notes.txt", user))
            .await
            .unwrap_err(),
    );
    assert_eq!((status, code), (404, ErrorCode::NotFound));
    let (_, code) = remote_code(c.read_file(&agent.query("", user)).await.unwrap_err());
    assert_eq!(code, ErrorCode::IsADirectory);
}

#[tokio::test]
async fn root_owned_files_are_protected_from_the_user() {
    let agent = Agent::start();
    let secret = agent.home().join("secret");
    std::fs::write(&secret, "s3cret").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = &agent.client;
    let (status, code) = remote_code(
        c.read_file(&agent.query("secret", BoxUser::User))
            .await
            .unwrap_err(),
    );
    assert_eq!((status, code), (403, ErrorCode::PermissionDenied));
    let etc = FileQuery {
        path: "/etc/berth-test-denied".into(),
        ..Default::default()
    };
    let (status, _) = remote_code(
        c.write_file(&etc, Bytes::from_static(b"x"))
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 403);
    // A body far larger than the socket's buffers: the agent refuses at once but still
    // reads it, so the client gets the 403 instead of a broken pipe.
    let (status, _) = remote_code(
        c.write_file(&etc, Bytes::from(vec![b'x'; 8 << 20]))
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 403);
    assert!(!Path::new("/etc/berth-test-denied").exists());
    assert_eq!(
        c.read_file(&agent.query("secret", BoxUser::Root))
            .await
            .unwrap(),
        "s3cret"
    );
    let bad = FileQuery {
        path: "/tmp/a\0b".into(),
        ..Default::default()
    };
    assert_eq!(
        remote_code(c.stat(&bad).await.unwrap_err()),
        (400, ErrorCode::InvalidRequest)
    );
    let relative = FileQuery {
        path: "relative".into(),
        ..Default::default()
    };
    assert_eq!(
        remote_code(c.stat(&relative).await.unwrap_err()),
        (400, ErrorCode::InvalidRequest)
    );
}

/// An archive read as the box user that meets a file only root may read is cut, never
/// finished as if the file were not there; as root the same tree comes out whole.
#[tokio::test]
async fn an_archive_the_user_cannot_read_whole_is_cut() {
    let agent = Agent::start();
    let tree = agent.home().join("tree");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("a"), vec![b'a'; 256 * 1024]).unwrap();
    std::fs::write(tree.join("secret"), "s3cret").unwrap();
    std::fs::set_permissions(tree.join("secret"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let c = &agent.client;
    assert!(
        read_tar(c, &agent.query("tree", BoxUser::User))
            .await
            .is_err(),
        "a cut tar ended cleanly"
    );
    let whole = read_tar(c, &agent.query("tree", BoxUser::Root))
        .await
        .unwrap();
    // Two entries of data and headers, then the end-of-archive blocks.
    assert!(
        whole.len() >= 256 * 1024 + 3 * 512 + 1024,
        "{}",
        whole.len()
    );
    assert!(whole.ends_with(&[0; 1024]));
    // The tree's own directory, unreadable: the call's error, before any tar.
    let (status, code) = remote_code(
        c.download_archive(&FileQuery {
            path: "/root".into(),
            ..Default::default()
        })
        .await
        .err()
        .unwrap(),
    );
    assert_eq!((status, code), (403, ErrorCode::PermissionDenied));
}

async fn read_tar(c: &GuestClient, q: &FileQuery) -> Result<Vec<u8>, GuestError> {
    let mut tar = c.download_archive(q).await?;
    let mut bytes = Vec::new();
    while let Some(chunk) = tar.next_chunk().await? {
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes)
}

/// Writes `data` to `q` in `mode`.
async fn write_as(c: &GuestClient, q: &FileQuery, mode: WriteMode, data: &'static [u8]) {
    let upload = c.open_upload(q, mode).await.unwrap();
    upload
        .send(http_body_util::Full::new(Bytes::from_static(data)))
        .await
        .unwrap();
}

#[tokio::test]
async fn an_in_place_write_keeps_the_file_an_atomic_one_replaces_it() {
    let agent = Agent::start();
    let c = &agent.client;
    let q = agent.query("kept.txt", BoxUser::User);
    let path = agent.home().join("kept.txt");
    write_as(c, &q, WriteMode::InPlace, b"a first, longer text").await;
    let first = std::fs::metadata(&path).unwrap();
    assert_eq!((first.uid(), first.mode() & 0o777), (BOX_USER_UID, 0o644));
    // In place: the same file, truncated and written (what a watch of the directory sees as
    // the name written, as with E2B's envd).
    write_as(c, &q, WriteMode::InPlace, b"second").await;
    assert_eq!(std::fs::read(&path).unwrap(), b"second");
    assert_eq!(std::fs::metadata(&path).unwrap().ino(), first.ino());
    // Atomic: a new file renamed over it.
    write_as(c, &q, WriteMode::Atomic, b"third").await;
    assert_eq!(std::fs::read(&path).unwrap(), b"third");
    assert_ne!(std::fs::metadata(&path).unwrap().ino(), first.ino());
    // In place is still as the box user: root's files stay out of reach.
    let root_only = agent.home().join("root-only");
    std::fs::write(&root_only, b"root's").unwrap();
    std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o600)).unwrap();
    let upload = c
        .open_upload(&agent.query("root-only", BoxUser::User), WriteMode::InPlace)
        .await
        .unwrap();
    let err = upload
        .send(http_body_util::Full::new(Bytes::from_static(b"mine")))
        .await
        .unwrap_err();
    assert_eq!(remote_code(err).1, ErrorCode::PermissionDenied);
    assert_eq!(std::fs::read(&root_only).unwrap(), b"root's");
}
