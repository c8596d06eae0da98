//! Memory snapshots: what is taken reads back and diffs by path, an unchanged tree costs
//! nothing, a changed file costs about its own size, and a GC deletes only what no
//! snapshot names.

use berth_chunks::memory::{diff, MemoryInput, TakeSnapshot};
use berth_chunks::ChunkError;
use berth_protocol::memory_history::{ChangeKind, SnapshotReason};
use bytes::Bytes;

use crate::support::{noise, on_both, Rig};

on_both!(
    a_snapshot_reads_back_and_diffs_by_path,
    a_hundred_snapshots_of_one_changing_file_cost_about_its_size,
    gc_deletes_only_what_no_snapshot_names,
    a_damaged_file_is_refused_on_read,
);

fn file(path: &str, content: impl Into<Bytes>) -> MemoryInput {
    MemoryInput::File {
        path: path.into(),
        content: content.into(),
    }
}

fn dir(path: &str) -> MemoryInput {
    MemoryInput::Dir(path.into())
}

fn take(box_id: &str, inputs: Vec<MemoryInput>) -> TakeSnapshot<'_> {
    TakeSnapshot {
        box_id,
        reason: SnapshotReason::Request,
        inputs,
    }
}

async fn a_snapshot_reads_back_and_diffs_by_path(rig: Rig) {
    let history = rig.store.memory();
    let first = history
        .take(take(
            "bx_a",
            vec![
                dir("entities"),
                dir("timeline"),
                file("README.md", "memory of [[user]]"),
                file("entities/alice.md", "Alice likes tea"),
                file("entities/bob.md", "Bob"),
            ],
        ))
        .await
        .unwrap();
    assert_eq!((first.files, first.bytes), (3, 18 + 15 + 3));
    let second = history
        .take(take(
            "bx_a",
            vec![
                dir("entities"),
                dir("timeline"),
                file("README.md", "memory of [[user]]"),
                file("entities/alice.md", "Alice likes coffee"),
                file("timeline/2026-12-05.md", "met carol"),
            ],
        ))
        .await
        .unwrap();
    assert_ne!(first.root, second.root);
    let listed = history.list("bx_a").await.unwrap();
    assert_eq!(listed, [first.clone(), second.clone()]);
    assert_eq!(history.latest("bx_a").await.unwrap(), Some(second.clone()));
    assert!(history.list("bx_other").await.unwrap().is_empty());

    let files = history.files(&first).await.unwrap();
    assert!(files["entities"].is_dir && files["timeline"].is_dir);
    assert_eq!(
        history.read(&files["entities/alice.md"]).await.unwrap(),
        "Alice likes tea"
    );
    let later = history.files(&second).await.unwrap();
    let changes: Vec<_> = diff(&files, &later)
        .into_iter()
        .map(|c| (c.path, c.change))
        .collect();
    assert_eq!(
        changes,
        [
            ("entities/alice.md".to_owned(), ChangeKind::Modified),
            ("entities/bob.md".to_owned(), ChangeKind::Removed),
            ("timeline/2026-12-05.md".to_owned(), ChangeKind::Added),
        ]
    );

    // The same tree again: a new record, nothing else stored.
    let third = history
        .take(take(
            "bx_a",
            vec![
                dir("timeline"),
                file("entities/alice.md", "Alice likes coffee"),
                file("README.md", "memory of [[user]]"),
                file("timeline/2026-12-05.md", "met carol"),
            ],
        ))
        .await
        .unwrap();
    assert_eq!(third.root, second.root);
    assert_eq!(third.stored_bytes, 0);
    assert!(third.id > second.id);

    // A file where a directory must be is refused, and nothing is recorded.
    let err = history
        .take(take("bx_a", vec![file("x", "1"), file("x/y", "2")]))
        .await
        .unwrap_err();
    assert!(matches!(err, ChunkError::MemoryInput(_)), "{err}");
    assert_eq!(history.list("bx_a").await.unwrap().len(), 3);
    rig.assert_no_markers().await;
}

/// The measure: 100 snapshots of a 10 MiB memory whose one 4 KiB file changes
/// each time take less than twice the memory's size.
async fn a_hundred_snapshots_of_one_changing_file_cost_about_its_size(rig: Rig) {
    let history = rig.store.memory();
    let unchanged: Vec<MemoryInput> = (0..40)
        .map(|i| file(&format!("entities/e{i:02}.md"), noise(i, 256 * 1024)))
        .collect();
    let memory = |round: u64| {
        let mut inputs = unchanged.clone();
        inputs.push(file("timeline/today.md", noise(1000 + round, 4096)));
        inputs
    };
    let size = 40 * 256 * 1024 + 4096;
    for round in 0..100 {
        history.take(take("bx_h", memory(round))).await.unwrap();
    }
    let mut stored = 0u64;
    for key in rig.raw_keys("memory").await {
        stored += rig.raw_get(&key).await.unwrap().len() as u64;
    }
    eprintln!(
        "100 snapshots of {size} bytes whose one 4 KiB file changed each time: {stored} bytes stored ({:.2}x)",
        stored as f64 / size as f64
    );
    assert!(
        stored < 2 * size,
        "{stored} bytes stored for a memory of {size}"
    );
    assert_eq!(history.list("bx_h").await.unwrap().len(), 100);
}

async fn gc_deletes_only_what_no_snapshot_names(rig: Rig) {
    let history = rig.store.memory();
    let shared = noise(7, 10_000);
    let a1 = history
        .take(take(
            "bx_a",
            vec![file("old.md", noise(1, 5000)), file("s.md", shared.clone())],
        ))
        .await
        .unwrap();
    let a2 = history
        .take(take(
            "bx_a",
            vec![file("new.md", noise(2, 5000)), file("s.md", shared.clone())],
        ))
        .await
        .unwrap();
    // Another box with the same file stores nothing new for it.
    let b1 = history
        .take(take("bx_b", vec![file("s.md", shared.clone())]))
        .await
        .unwrap();
    assert!(b1.stored_bytes < 1000, "{}", b1.stored_bytes);

    history
        .forget("bx_a", std::slice::from_ref(&a1.id))
        .await
        .unwrap();
    let report = history.gc().await.unwrap();
    assert!(!report.skipped_for_upload);
    // old.md's blob and a1's root tree.
    assert_eq!(report.objects_deleted, 2, "{report:?}");
    for (box_id, snap) in [("bx_a", &a2), ("bx_b", &b1)] {
        let files = history.files(snap).await.unwrap();
        for f in files.values() {
            history.read(f).await.unwrap();
        }
        assert!(history.get(box_id, &snap.id).await.unwrap().is_some());
    }
    history.forget("bx_a", &[a2.id]).await.unwrap();
    history.forget("bx_b", &[b1.id]).await.unwrap();
    history.gc().await.unwrap();
    assert_eq!(rig.raw_keys("memory").await, Vec::<String>::new());
    rig.assert_no_markers().await;
}

async fn a_damaged_file_is_refused_on_read(rig: Rig) {
    let history = rig.store.memory();
    let snap = history
        .take(take("bx_d", vec![file("a.md", "alice")]))
        .await
        .unwrap();
    let files = history.files(&snap).await.unwrap();
    let key = rig.raw_keys("memory/blobs").await.pop().expect("one blob");
    let other = zstd::bulk::compress(b"alicf", 3).unwrap();
    rig.raw_put(&key, other).await;
    let err = history.read(&files["a.md"]).await.unwrap_err().to_string();
    assert!(err.contains("do not match its hash"), "{err}");
}
