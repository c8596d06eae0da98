//! A full disk under the data dir: below the free-space threshold new boxes are refused
//! with 507 `insufficient_storage` while everything else is served; a store write that
//! finds no space fails whole with the same clear error, nothing accepted before is lost,
//! and the same call works once space is back. The data dir is on a small tmpfs the test
//! mounts (root only; skipped otherwise) and unmounts even when it fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;

use crate::harness::{error_code, NoBoxes, TestServer};

/// A tmpfs mounted on a temp dir for the guard's life.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size_mib: u64) -> Result<SmallDisk, String> {
        // SAFETY: geteuid has no arguments and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("mounting a tmpfs needs root".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let status = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size_mib}m,mode=0755"),
                "tmpfs",
            ])
            .arg(dir.path())
            .status()
            .map_err(|e| format!("mount: {e}"))?;
        if !status.success() {
            return Err(format!("mount -t tmpfs failed: {status}"));
        }
        Ok(SmallDisk { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the file system of `dir` to the last byte with one file; returns it.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in [1 << 20, 4096, 1] {
        let buf = vec![0x5a_u8; chunk];
        while file.write_all(&buf).is_ok() {}
    }
    path
}

#[tokio::test]
async fn a_full_disk_refuses_new_boxes_and_store_writes_clearly_and_loses_nothing() {
    let disk = match SmallDisk::mount(24) {
        Ok(disk) => disk,
        Err(why) => {
            berth_testkit::skip("root", &why);
            return;
        }
    };
    // What the sparse volumes may take is not this test's point: it may be promised many
    // times over (sparse_volumes_cannot_promise_more_disk_than_is_free is about that).
    let server = on_small_disk(&disk, 100.0).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "before", "disk_mib": 64})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    let filler = fill(disk.path());
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "during", "disk_mib": 64})),
        )
        .await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    assert_eq!(error_code(&body), "insufficient_storage");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("nearly full") && message.contains("create a box"),
        "{message}"
    );

    // Store writes (not guarded: they are small) go on until the store finds no page left;
    // then the write fails whole.
    let value = "v".repeat(8000);
    let mut accepted = Vec::new();
    let refused = loop {
        let name = format!("s{}", accepted.len());
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/secrets",
                Some(json!({"name": name, "value": value})),
            )
            .await;
        match status {
            StatusCode::CREATED => accepted.push(name),
            StatusCode::INSUFFICIENT_STORAGE => {
                assert_eq!(error_code(&body), "insufficient_storage", "{body}");
                let message = body["error"]["message"].as_str().unwrap();
                assert!(
                    message.contains("disk is full") && message.contains("retry"),
                    "{message}"
                );
                break name;
            }
            other => panic!("secret {name}: {other} {body}"),
        }
        assert!(accepted.len() < 5000, "the store never ran out of space");
    };
    // Reads are served throughout.
    let (status, body) = server.call(Method::GET, "/v1/boxes/before", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    std::fs::remove_file(&filler).unwrap();
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/secrets",
            Some(json!({"name": refused, "value": value})),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "the same write once space is back: {body}"
    );
    accepted.push(refused);
    let (status, list) = server.call(Method::GET, "/v1/secrets", None).await;
    assert_eq!(status, StatusCode::OK, "{list}");
    let names: Vec<&str> = list["secrets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for name in &accepted {
        assert!(names.contains(&name.as_str()), "{name} was lost: {names:?}");
    }
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "after", "disk_mib": 64})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    drop(server);
}

/// A daemon on `disk` with `[storage] overcommit = ratio`.
async fn on_small_disk(disk: &SmallDisk, ratio: f64) -> TestServer {
    let data = tempfile::tempdir_in(disk.path()).unwrap();
    let mut host = berth_server::HostConfig::default();
    host.storage.overcommit = ratio;
    TestServer::start_with_host(
        berth_server::Runtimes::single(Arc::new(NoBoxes)),
        None,
        data,
        host,
    )
    .await
}

/// Sparse volumes take nothing until written, so free space alone would let a tenant
/// promise the host's disk many times over: 64 MiB boxes on a 96 MiB disk. What they may
/// still take counts against the threshold (overcommit 1.0: none of it twice); a ratio
/// allows that much more.
// Several workers, so concurrent creates really run at once (as in the daemon).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sparse_volumes_cannot_promise_more_disk_than_is_free() {
    let disk = match SmallDisk::mount(96) {
        Ok(disk) => disk,
        Err(why) => {
            berth_testkit::skip("root", &why);
            return;
        }
    };
    let server = on_small_disk(&disk, 1.0).await;
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "a", "disk_mib": 64})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "b", "disk_mib": 64})),
        )
        .await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
    assert_eq!(error_code(&body), "insufficient_storage");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("promised")
            && message.contains("overcommit")
            && message.contains("create a box"),
        "{message}"
    );
    // Deleting the first box takes its promise back.
    let (status, _) = server.call(Method::DELETE, "/v1/boxes/a", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "b", "disk_mib": 64})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // Concurrent creates cannot both count the same free space.
    let (status, _) = server.call(Method::DELETE, "/v1/boxes/b", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let calls = (0..16).map(|i| {
        server.call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": format!("r{i}"), "disk_mib": 64})),
        )
    });
    let statuses: Vec<StatusCode> = futures_util::future::join_all(calls)
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    let made = statuses
        .iter()
        .filter(|s| **s == StatusCode::CREATED)
        .count();
    assert_eq!(made, 1, "{statuses:?}");
    drop(server);

    // Overcommit 4: four times the free space may be promised.
    let server = on_small_disk(&disk, 4.0).await;
    for name in ["c", "d", "e"] {
        let (status, body) = server
            .call(
                Method::POST,
                "/v1/boxes",
                Some(json!({"name": name, "disk_mib": 64})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{name}: {body}");
    }
    let (status, body) = server
        .call(
            Method::POST,
            "/v1/boxes",
            Some(json!({"name": "f", "disk_mib": 1024})),
        )
        .await;
    assert_eq!(status, StatusCode::INSUFFICIENT_STORAGE, "{body}");
}
