//! The markers between uploads and GCs: a live one holds the other side back, a stale one
//! (a crashed process's) is ignored and deleted.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::{ignore_progress, noise, on_both, sparse_image, wait_for, Rig, CHUNK};

on_both!(
    a_stale_marker_is_ignored_and_deleted,
    a_live_upload_marker_keeps_gc_from_sweeping,
    an_upload_waits_for_a_gc_that_was_running,
);

/// A chunk no manifest names, as an upload leaves it before writing its manifest.
const UNNAMED: &str = "chunks/ee/ee00000000000000000000000000000000000000000000000000000000000000";

/// A marker's body as this crate writes it, refreshed `age` ago.
fn marker_body(age: Duration) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let then = (now - age).as_secs();
    format!("{{\"started_unix\":{then},\"refreshed_unix\":{then}}}")
}

const TWO_HOURS: Duration = Duration::from_secs(7200);

async fn a_stale_marker_is_ignored_and_deleted(rig: Rig) {
    // A crashed upload's marker: GC sweeps anyway, and deletes it.
    rig.raw_put("uploads/crashed", marker_body(TWO_HOURS)).await;
    rig.raw_put(UNNAMED, "junk").await;
    let report = rig.store.gc(2).await.unwrap();
    assert!(!report.skipped_for_upload);
    assert_eq!(report.chunks_deleted, 1);
    assert_eq!(rig.raw_get(UNNAMED).await, None);
    assert_eq!(rig.raw_get("uploads/crashed").await, None);

    // A crashed GC's marker: an upload goes ahead, and deletes it.
    rig.raw_put("gc/crashed", marker_body(TWO_HOURS)).await;
    let image = rig.path("image");
    sparse_image(&image, CHUNK, &[(0, noise(1, 1000))]);
    let uploaded = tokio::time::timeout(
        crate::support::PATIENCE,
        rig.store.upload("v", 1, &image, None, &ignore_progress),
    )
    .await
    .expect("a stale GC marker holds no upload back")
    .unwrap();
    assert_eq!(uploaded.chunks_uploaded, 1);
    assert_eq!(rig.raw_get("gc/crashed").await, None);
    rig.assert_no_markers().await;
}

async fn a_live_upload_marker_keeps_gc_from_sweeping(rig: Rig) {
    rig.raw_put("uploads/running", marker_body(Duration::ZERO))
        .await;
    rig.raw_put(UNNAMED, "being uploaded").await;
    let report = rig.store.gc(2).await.unwrap();
    assert!(report.skipped_for_upload);
    assert_eq!((report.chunks_deleted, report.chunks_kept), (0, 0));
    assert!(
        rig.raw_get(UNNAMED).await.is_some(),
        "the upload's chunk stays"
    );
    assert!(rig.raw_get("uploads/running").await.is_some());
    assert_eq!(
        rig.raw_keys("gc").await,
        Vec::<String>::new(),
        "the GC removed its marker"
    );

    // The upload is over (its manifest would name the chunk; this one has none).
    rig.raw_delete("uploads/running").await;
    let report = rig.store.gc(2).await.unwrap();
    assert!(!report.skipped_for_upload);
    assert_eq!(report.chunks_deleted, 1);
    assert_eq!(rig.raw_get(UNNAMED).await, None);
    rig.assert_no_markers().await;
}

async fn an_upload_waits_for_a_gc_that_was_running(rig: Rig) {
    rig.raw_put("gc/running", marker_body(Duration::ZERO)).await;
    let image = rig.path("image");
    sparse_image(
        &image,
        2 * CHUNK,
        &[(0, noise(1, 1000)), (CHUNK, noise(2, 1000))],
    );
    let store = rig.reopen();
    let upload = tokio::spawn(async move {
        store
            .upload("v", 1, &image, None, &ignore_progress)
            .await
            .unwrap()
    });
    wait_for("the upload's marker", || async {
        !rig.raw_keys("uploads").await.is_empty()
    })
    .await;
    // It has seen the GC (it lists gc/ right after writing its marker) and must not store
    // a chunk until that GC is over. A negative can only be watched for a while: a second
    // on a loaded machine may let a broken upload pass, never fail a correct one.
    let watch_until = tokio::time::Instant::now() + Duration::from_secs(1);
    while tokio::time::Instant::now() < watch_until {
        assert_eq!(rig.raw_keys("chunks").await, Vec::<String>::new());
        assert_eq!(rig.raw_keys("volumes").await, Vec::<String>::new());
        assert!(!upload.is_finished());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    rig.raw_delete("gc/running").await;
    let uploaded = tokio::time::timeout(crate::support::PATIENCE, upload)
        .await
        .expect("the upload goes on once the GC is over")
        .unwrap();
    assert_eq!(uploaded.chunks_uploaded, 2);
    rig.assert_no_markers().await;
}
