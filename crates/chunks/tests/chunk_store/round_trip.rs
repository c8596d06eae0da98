//! Upload then restore gives the same bytes back, holes as holes, and a second upload
//! stores only what changed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use berth_chunks::ChunkError;

use crate::support::{
    allocated, assert_same_bytes, ignore_progress, names_in, noise, on_both, patch_image,
    sparse_image, text, Rig, CHUNK, MIB,
};

const VOLUME: &str = "bx_lfae627hy7e4uonnf6p5";

on_both!(
    a_sparse_image_with_holes_and_zeros_restores_byte_identical,
    a_small_change_to_a_large_image_uploads_at_most_two_chunks,
);

async fn a_sparse_image_with_holes_and_zeros_restores_byte_identical(rig: Rig) {
    // Chunks: 0 noise | 1 hole | 2 written zeros | 3 a little text amid a hole | 4-8 holes |
    // 9 noise across its middle | 10 partial, text at its very end.
    let size = 10 * CHUNK + 123;
    let image = rig.path("image");
    sparse_image(
        &image,
        size,
        &[
            (0, noise(1, CHUNK)),
            (2 * CHUNK, vec![0; CHUNK as usize]),
            (3 * CHUNK + MIB, text(3, 5000)),
            (9 * CHUNK + 512 * 1024, noise(9, MIB)),
            (10 * CHUNK + 100, text(10, 23)),
        ],
    );
    let seen = Mutex::new(Vec::new());
    let progress = |p: berth_chunks::Progress| seen.lock().unwrap().push(p);
    let uploaded = rig
        .store
        .upload(VOLUME, 1, &image, None, &progress)
        .await
        .unwrap();

    let manifest = &uploaded.manifest;
    assert_eq!((manifest.size, manifest.chunk_size), (size, CHUNK));
    let stored: Vec<bool> = manifest.chunks.iter().map(Option::is_some).collect();
    let expected = [
        true, false, false, true, false, false, false, false, false, true, true,
    ];
    assert_eq!(stored, expected, "holes and zeros are no chunk");
    assert_eq!(uploaded.chunks_uploaded, 4);
    assert_eq!(uploaded.chunks_reused, 0);
    let stored_bytes: u64 = manifest.chunks.iter().flatten().map(|c| c.stored).sum();
    assert_eq!(uploaded.bytes_uploaded, stored_bytes);
    assert_eq!(rig.raw_keys("chunks").await.len(), 4);
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.last().map(|p| (p.done, p.total)), Some((size, size)));
    assert!(seen.windows(2).all(|w| w[0].done <= w[1].done), "{seen:?}");

    assert_eq!(&rig.store.manifest(VOLUME, 1).await.unwrap(), manifest);
    assert_eq!(
        rig.store.latest(VOLUME).await.unwrap().as_ref(),
        Some(manifest)
    );
    assert_eq!(
        rig.reopen().latest(VOLUME).await.unwrap().as_ref(),
        Some(manifest)
    );

    // Into a new file, and over an existing one.
    let dest_dir = rig.path("restored");
    std::fs::create_dir(&dest_dir).unwrap();
    let dest = dest_dir.join("volume.img");
    let restored_bytes = AtomicU64::new(0);
    let progress = |p: berth_chunks::Progress| restored_bytes.store(p.done, Ordering::Relaxed);
    let restored = rig.store.restore(manifest, &dest, &progress).await.unwrap();
    assert_eq!(restored.chunks, 4);
    assert_eq!(restored_bytes.load(Ordering::Relaxed), size);
    assert_same_bytes(&dest, &image);
    assert!(
        allocated(&dest) < 8 * CHUNK,
        "the restore is sparse: {} bytes allocated of {size}",
        allocated(&dest)
    );
    std::fs::write(&dest, b"an older image").unwrap();
    rig.store
        .restore(manifest, &dest, &ignore_progress)
        .await
        .unwrap();
    assert_same_bytes(&dest, &image);
    assert_eq!(
        names_in(&dest_dir),
        ["volume.img"],
        "no temporary file is left"
    );
    rig.assert_no_markers().await;
}

async fn a_small_change_to_a_large_image_uploads_at_most_two_chunks(rig: Rig) {
    let size = 1024 * MIB;
    let image = rig.path("image");
    // 16 MiB of data in a 1 GiB image, in 2 MiB pieces, some straddling two chunks.
    let writes: Vec<(u64, Vec<u8>)> = (0..8)
        .map(|n| {
            let at = n * 128 * MIB + n * 700 * 1024;
            let data = if n % 2 == 0 {
                noise(n, 2 * MIB)
            } else {
                text(n, 2 * MIB)
            };
            (at, data)
        })
        .collect();
    sparse_image(&image, size, &writes);
    let first = rig
        .store
        .upload(VOLUME, 1, &image, None, &ignore_progress)
        .await
        .unwrap();
    let data_chunks = first.manifest.chunks.iter().flatten().count() as u64;
    assert_eq!(first.chunks_uploaded, data_chunks);
    let first_restored = rig.path("first");
    rig.store
        .restore(&first.manifest, &first_restored, &ignore_progress)
        .await
        .unwrap();
    assert_same_bytes(&first_restored, &image);

    // 1 MiB across the chunk boundary at 644 MiB, inside the data written at 643.4 MiB.
    let at = 644 * MIB - 512 * 1024;
    patch_image(&image, at, &noise(77, MIB));
    let second = rig
        .store
        .upload(VOLUME, 2, &image, Some(&first.manifest), &ignore_progress)
        .await
        .unwrap();
    assert_eq!(
        second.chunks_uploaded, 2,
        "a 1 MiB change across a boundary stores its two chunks, no more"
    );
    assert!(second.bytes_uploaded <= 2 * CHUNK + 4096);
    assert_eq!(second.chunks_reused, data_chunks - 2);

    let dest = rig.path("restored");
    rig.store
        .restore(&second.manifest, &dest, &ignore_progress)
        .await
        .unwrap();
    assert_same_bytes(&dest, &image);
    rig.store
        .restore(&first.manifest, &dest, &ignore_progress)
        .await
        .unwrap();
    assert_same_bytes(&dest, &first_restored);
    rig.assert_no_markers().await;
}

#[tokio::test]
async fn an_upload_refuses_a_bad_volume_name_or_a_missing_image() {
    let rig = Rig::dir();
    let image = rig.path("image");
    sparse_image(&image, CHUNK, &[(0, noise(1, 100))]);
    for volume in ["../escape", "a/b", ""] {
        let err = rig
            .store
            .upload(volume, 1, &image, None, &ignore_progress)
            .await
            .unwrap_err();
        assert!(matches!(err, ChunkError::BadVolume { .. }), "{err}");
    }
    let err = rig
        .store
        .upload(VOLUME, 1, &rig.path("absent"), None, &ignore_progress)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ChunkError::Io { .. }) && err.to_string().contains("absent"),
        "{err}"
    );
    assert_eq!(
        rig.raw_keys("").await,
        Vec::<String>::new(),
        "nothing was written"
    );
}
