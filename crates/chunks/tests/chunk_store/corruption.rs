//! What the store holds is not trusted: a damaged or missing chunk, or a manifest that is
//! not one, is an error that names it, and a failed restore leaves `dest` as it was.

use berth_chunks::{ChunkError, Manifest, ManifestProblem};

use crate::support::{ignore_progress, names_in, noise, on_both, sparse_image, text, Rig, CHUNK};

const VOLUME: &str = "bx_corrupt";

on_both!(
    a_flipped_byte_in_a_chunk_fails_the_restore_and_leaves_dest_untouched,
    a_deleted_chunk_fails_the_restore_and_leaves_dest_untouched,
    a_bad_manifest_is_a_clear_error,
);

/// Three chunks of data, uploaded; the manifest.
async fn three_chunks(rig: &Rig) -> Manifest {
    let image = rig.path("image");
    sparse_image(
        &image,
        3 * CHUNK,
        &[
            (0, noise(1, CHUNK)),
            (CHUNK, text(2, CHUNK)),
            (2 * CHUNK, noise(3, CHUNK / 2)),
        ],
    );
    rig.store
        .upload(VOLUME, 4, &image, None, &ignore_progress)
        .await
        .unwrap()
        .manifest
}

fn chunk_key(hash: &str) -> String {
    format!("chunks/{}/{hash}", &hash[..2])
}

async fn a_flipped_byte_in_a_chunk_fails_the_restore_and_leaves_dest_untouched(rig: Rig) {
    let manifest = three_chunks(&rig).await;
    let hash = manifest.chunks[1].as_ref().unwrap().hash.clone();
    let key = chunk_key(&hash);
    let mut stored = rig.raw_get(&key).await.unwrap().to_vec();
    let middle = stored.len() / 2;
    stored[middle] ^= 0x01;
    rig.raw_put(&key, stored).await;

    let dest_dir = rig.path("restored");
    std::fs::create_dir(&dest_dir).unwrap();
    let dest = dest_dir.join("volume.img");
    std::fs::write(&dest, b"the image from before").unwrap();
    let err = rig
        .store
        .restore(&manifest, &dest, &ignore_progress)
        .await
        .unwrap_err();
    match &err {
        ChunkError::Corrupt {
            volume,
            generation,
            index,
            hash: named,
            ..
        } => {
            assert_eq!((volume.as_str(), *generation, *index), (VOLUME, 4, 1));
            assert_eq!(named, &hash);
        }
        other => panic!("not Corrupt: {other}"),
    }
    let message = err.to_string();
    for part in ["chunk 1", hash.as_str(), VOLUME, "generation 4"] {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
    assert_eq!(std::fs::read(&dest).unwrap(), b"the image from before");
    assert_eq!(
        names_in(&dest_dir),
        ["volume.img"],
        "the temporary file is removed"
    );
    rig.assert_no_markers().await;
}

async fn a_deleted_chunk_fails_the_restore_and_leaves_dest_untouched(rig: Rig) {
    let manifest = three_chunks(&rig).await;
    let hash = manifest.chunks[2].as_ref().unwrap().hash.clone();
    rig.raw_delete(&chunk_key(&hash)).await;

    let dest_dir = rig.path("restored");
    std::fs::create_dir(&dest_dir).unwrap();
    let dest = dest_dir.join("volume.img");
    std::fs::write(&dest, b"the image from before").unwrap();
    let err = rig
        .store
        .restore(&manifest, &dest, &ignore_progress)
        .await
        .unwrap_err();
    match &err {
        ChunkError::Missing {
            index, hash: named, ..
        } => {
            assert_eq!((*index, named), (2, &hash));
        }
        other => panic!("not Missing: {other}"),
    }
    let message = err.to_string();
    for part in ["chunk 2", hash.as_str(), VOLUME, "generation 4"] {
        assert!(message.contains(part), "{part:?} not in: {message}");
    }
    assert_eq!(std::fs::read(&dest).unwrap(), b"the image from before");
    assert_eq!(
        names_in(&dest_dir),
        ["volume.img"],
        "the temporary file is removed"
    );
    rig.assert_no_markers().await;
}

async fn a_bad_manifest_is_a_clear_error(rig: Rig) {
    let manifest = three_chunks(&rig).await;
    let chunks_before = rig.raw_keys("chunks").await;

    let absent = rig.store.manifest(VOLUME, 5).await.unwrap_err();
    assert!(
        matches!(absent, ChunkError::NoManifest { generation: 5, .. }),
        "{absent}"
    );

    let key = format!("volumes/{VOLUME}/00000000000000000007.json");
    rig.raw_put(&key, "{\"volume\": \"bx_corrupt\", truncated")
        .await;
    let err = rig.store.manifest(VOLUME, 7).await.unwrap_err();
    assert!(
        matches!(&err, ChunkError::BadManifest { key: k, reason: ManifestProblem::NotJson(_) } if *k == key),
        "{err}"
    );
    assert!(err.to_string().contains(&key), "{err}");
    // The newest is bad: latest says so rather than fall back to an older one silently.
    let err = rig.store.latest(VOLUME).await.unwrap_err();
    assert!(matches!(err, ChunkError::BadManifest { .. }), "{err}");
    // A GC cannot know what a bad manifest names: it stops and deletes no chunk.
    let err = rig.store.gc(2).await.unwrap_err();
    assert!(matches!(err, ChunkError::BadManifest { .. }), "{err}");
    assert_eq!(rig.raw_keys("chunks").await, chunks_before);

    // Contents that disagree with their key.
    let mut moved = manifest.clone();
    moved.generation = 6;
    rig.raw_put(&key, serde_json::to_vec(&moved).unwrap()).await;
    let err = rig.store.manifest(VOLUME, 7).await.unwrap_err();
    assert!(
        matches!(
            err,
            ChunkError::BadManifest {
                reason: ManifestProblem::WrongGeneration { found: 6 },
                ..
            }
        ),
        "{err}"
    );
    // Chunks that do not add up to the size.
    let mut short = manifest.clone();
    short.generation = 7;
    short.chunks.pop();
    rig.raw_put(&key, serde_json::to_vec(&short).unwrap()).await;
    let err = rig.store.manifest(VOLUME, 7).await.unwrap_err();
    assert!(
        matches!(
            err,
            ChunkError::BadManifest {
                reason: ManifestProblem::ChunkCount {
                    found: 2,
                    expected: 3
                },
                ..
            }
        ),
        "{err}"
    );
    // A restore checks a manifest it is handed, too.
    let err = rig
        .store
        .restore(&short, &rig.path("never"), &ignore_progress)
        .await
        .unwrap_err();
    assert!(matches!(err, ChunkError::BadManifest { .. }), "{err}");
    assert!(!rig.path("never").exists());
    rig.assert_no_markers().await;
}
