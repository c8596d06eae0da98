use std::fs;
use std::time::{Duration, Instant};

use berth_protocol::guest::{BoxUser, FileQuery};

use super::*;

fn query(path: &std::path::Path, recursive: bool) -> FileQuery {
    FileQuery {
        path: path.to_string_lossy().into_owned(),
        user: BoxUser::Root,
        recursive,
        ..Default::default()
    }
}

/// Reads events until `want` has been seen, or fails at the deadline with what came.
async fn wait_for(rx: &mut mpsc::Receiver<Bytes>, want: &WatchEvent) -> Vec<WatchEvent> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = tokio::time::timeout(left, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("no {want:?} within 10 s; saw {seen:?}"))
            .expect("the watch ended");
        if line.as_ref() == b"\n" {
            continue;
        }
        let event: WatchEvent = serde_json::from_slice(&line).unwrap();
        let found = &event == want;
        seen.push(event);
        if found {
            return seen;
        }
    }
}

fn create(path: &str, dir: bool) -> WatchEvent {
    WatchEvent::Create {
        path: path.into(),
        dir,
    }
}

#[tokio::test]
async fn creates_changes_renames_and_deletes_are_seen_recursively() {
    let dir = tempfile::tempdir().unwrap();
    let mut rx = open(query(dir.path(), true)).await.unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    wait_for(&mut rx, &create("sub", true)).await;
    // The new subdirectory is watched too.
    fs::write(dir.path().join("sub/a"), b"1").unwrap();
    wait_for(&mut rx, &create("sub/a", false)).await;
    fs::write(dir.path().join("sub/a"), b"22").unwrap();
    wait_for(
        &mut rx,
        &WatchEvent::Modify {
            path: "sub/a".into(),
            dir: false,
        },
    )
    .await;
    fs::rename(dir.path().join("sub/a"), dir.path().join("b")).unwrap();
    wait_for(
        &mut rx,
        &WatchEvent::Rename {
            from: "sub/a".into(),
            to: "b".into(),
            dir: false,
        },
    )
    .await;
    // A renamed directory's watch follows its new name.
    fs::rename(dir.path().join("sub"), dir.path().join("sub2")).unwrap();
    fs::write(dir.path().join("sub2/c"), b"").unwrap();
    wait_for(&mut rx, &create("sub2/c", false)).await;
    fs::remove_file(dir.path().join("b")).unwrap();
    wait_for(
        &mut rx,
        &WatchEvent::Delete {
            path: "b".into(),
            dir: false,
        },
    )
    .await;
    // The watched directory itself going away ends the stream after `gone`.
    fs::remove_dir_all(dir.path()).unwrap();
    wait_for(&mut rx, &WatchEvent::Gone).await;
    let end = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
    assert!(matches!(end, Ok(None)), "{end:?}");
}

#[tokio::test]
async fn without_recursive_only_the_top_level_is_watched() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    let mut rx = open(query(dir.path(), false)).await.unwrap();
    fs::write(dir.path().join("sub/hidden"), b"").unwrap();
    fs::write(dir.path().join("top"), b"").unwrap();
    let seen = wait_for(&mut rx, &create("top", false)).await;
    assert_eq!(seen, [create("top", false)]);
}

#[test]
fn a_full_queue_drops_events_and_then_says_overflow() {
    let (tx, mut rx) = mpsc::channel(4);
    let mut queue = Queue::new(tx);
    for i in 0..10 {
        queue.push(&create(&format!("f{i}"), false)).ok().unwrap();
    }
    let mut lines = Vec::new();
    while let Ok(line) = rx.try_recv() {
        lines.push(serde_json::from_slice::<WatchEvent>(&line).unwrap());
    }
    assert_eq!(lines.len(), 4);
    // Room again with nothing new: the owed overflow goes on the next quiet turn.
    assert!(queue.idle().is_ok());
    let next: Vec<WatchEvent> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|l| serde_json::from_slice(&l).unwrap())
        .collect();
    assert_eq!(next, [WatchEvent::Overflow]);
    for i in 0..10 {
        queue.push(&create(&format!("g{i}"), false)).ok().unwrap();
    }
    while rx.try_recv().is_ok() {}
    // Room again: the overflow goes first, then what comes next.
    queue.push(&create("after", false)).ok().unwrap();
    let next: Vec<WatchEvent> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|l| serde_json::from_slice(&l).unwrap())
        .collect();
    assert_eq!(next, [WatchEvent::Overflow, create("after", false)]);
}

/// Whether an inotify descriptor of this process watches `dir` (by its inode, from
/// `/proc/self/fdinfo`): other tests' watches, in threads of the same process, do not count.
fn watched(dir: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    let ino = format!(" ino:{:x} ", fs::metadata(dir).unwrap().ino());
    fs::read_dir("/proc/self/fdinfo")
        .unwrap()
        .flatten()
        .filter_map(|e| fs::read_to_string(e.path()).ok())
        .any(|info| {
            info.lines()
                .any(|l| l.starts_with("inotify") && l.contains(&ino))
        })
}

#[tokio::test]
async fn a_client_that_leaves_ends_the_watch_and_its_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    assert!(!watched(dir.path()));
    let rx = open(query(dir.path(), true)).await.unwrap();
    assert!(watched(dir.path()));
    drop(rx);
    let deadline = Instant::now() + Duration::from_secs(10);
    while watched(dir.path()) {
        assert!(
            Instant::now() < deadline,
            "the inotify descriptor stayed open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_missing_or_non_directory_path_is_the_calls_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = open(query(&dir.path().join("nope"), false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), berth_protocol::ErrorCode::NotFound);
    fs::write(dir.path().join("file"), b"").unwrap();
    let err = open(query(&dir.path().join("file"), false))
        .await
        .unwrap_err();
    assert_eq!(err.code(), berth_protocol::ErrorCode::NotADirectory);
}

/// What was in a new subdirectory before its watch was added (made in the same breath
/// as the directory) is told as created: the watcher looks inside once it watches it.
#[test]
fn what_a_new_directory_held_before_its_watch_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let mut watcher = Watcher::new(dir.path().to_owned(), true).unwrap();
    // Both exist before the watcher reads the directory's IN_CREATE.
    fs::create_dir_all(dir.path().join("d/e")).unwrap();
    fs::write(dir.path().join("d/f"), b"x").unwrap();
    fs::write(dir.path().join("d/e/g"), b"y").unwrap();
    let (tx, mut rx) = mpsc::channel(WATCH_QUEUE_EVENTS);
    let mut queue = Queue::new(tx);
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains(&create("d/e/g", false)) {
        assert!(Instant::now() < deadline, "saw only {seen:?}");
        watcher.step(&mut queue).ok().unwrap();
        while let Ok(line) = rx.try_recv() {
            if line.as_ref() != b"\n" {
                seen.push(serde_json::from_slice::<WatchEvent>(&line).unwrap());
            }
        }
    }
    for want in [create("d", true), create("d/f", false), create("d/e", true)] {
        assert!(seen.contains(&want), "{want:?} not in {seen:?}");
    }
    // And what comes after is watched as usual.
    fs::write(dir.path().join("d/e/h"), b"").unwrap();
    while !seen.contains(&create("d/e/h", false)) {
        assert!(Instant::now() < deadline, "saw only {seen:?}");
        watcher.step(&mut queue).ok().unwrap();
        while let Ok(line) = rx.try_recv() {
            if line.as_ref() != b"\n" {
                seen.push(serde_json::from_slice::<WatchEvent>(&line).unwrap());
            }
        }
    }
}
