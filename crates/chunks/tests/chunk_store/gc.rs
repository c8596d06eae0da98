//! GC keeps each volume's newest manifests and what they name, deletes the rest, and never
//! a chunk that a finished manifest names, even with uploads running all along.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use berth_chunks::{ChunkError, ChunkStore, GcReport, Manifest};

use crate::support::{
    assert_same_bytes, ignore_progress, noise, on_both, patch_image, sparse_copy, sparse_image,
    Rig, CHUNK, PATIENCE,
};

on_both!(
    gc_keeps_the_newest_manifests_and_the_chunks_they_name,
    gc_running_with_uploads_never_deletes_a_named_chunk,
);

/// The hashes `manifests` name.
fn named<'a>(manifests: impl IntoIterator<Item = &'a Manifest>) -> HashSet<String> {
    manifests
        .into_iter()
        .flat_map(|m| m.chunks.iter().flatten().map(|c| c.hash.clone()))
        .collect()
}

/// The hashes of the chunks in the store.
async fn stored(rig: &Rig) -> HashSet<String> {
    rig.raw_keys("chunks")
        .await
        .iter()
        .map(|key| key.rsplit('/').next().unwrap().to_owned())
        .collect()
}

async fn gc_keeps_the_newest_manifests_and_the_chunks_they_name(rig: Rig) {
    let store = &rig.store;
    // Volume a: four generations, each changing one chunk of three; b: one; c: one, forgotten.
    let image = rig.path("a.img");
    sparse_image(&image, 3 * CHUNK, &[(0, noise(1, 3 * CHUNK))]);
    let mut a = Vec::new();
    let mut base: Option<Manifest> = None;
    for generation in 1..=4 {
        patch_image(
            &image,
            (generation % 3) * CHUNK,
            &noise(10 + generation, 1000),
        );
        let up = store
            .upload("a", generation, &image, base.as_ref(), &ignore_progress)
            .await
            .unwrap();
        base = Some(up.manifest.clone());
        let copy = rig.path(&format!("a{generation}.img"));
        sparse_copy(&image, &copy);
        a.push((up.manifest, copy));
    }
    let other = rig.path("b.img");
    sparse_image(&other, 2 * CHUNK, &[(CHUNK, noise(20, 100))]);
    let b = store
        .upload("b", 1, &other, None, &ignore_progress)
        .await
        .unwrap()
        .manifest;
    sparse_image(&other, CHUNK, &[(0, noise(30, 100))]);
    let c = store
        .upload("c", 9, &other, None, &ignore_progress)
        .await
        .unwrap()
        .manifest;
    store.forget_volume("c").await.unwrap();
    assert_eq!(store.latest("c").await.unwrap(), None);
    assert_eq!(store.generations("c").await.unwrap(), Vec::<u64>::new());

    let all = named(a.iter().map(|(m, _)| m).chain([&b, &c]));
    assert_eq!(stored(&rig).await, all);
    let kept = named([&a[2].0, &a[3].0, &b]);
    let before = store.usage().await.unwrap();
    assert_eq!((before.chunks, before.manifests), (all.len() as u64, 5));

    let report = store.gc(2).await.unwrap();
    assert_eq!(
        report,
        GcReport {
            manifests_deleted: 2,
            chunks_deleted: (all.len() - kept.len()) as u64,
            bytes_freed: report.bytes_freed,
            chunks_kept: kept.len() as u64,
            skipped_for_upload: false,
        }
    );
    assert!(report.bytes_freed > 0);
    assert_eq!(stored(&rig).await, kept);
    assert_eq!(store.generations("a").await.unwrap(), [3, 4]);
    let err = store.manifest("a", 1).await.unwrap_err();
    assert!(matches!(err, ChunkError::NoManifest { .. }), "{err}");
    let after = store.usage().await.unwrap();
    assert_eq!((after.chunks, after.manifests), (kept.len() as u64, 3));
    assert_eq!(
        after.bytes + report.bytes_freed,
        before.bytes - manifests_bytes_gone(&a)
    );

    for (manifest, copy) in &a[2..] {
        let dest = rig.path("restored");
        store
            .restore(manifest, &dest, &ignore_progress)
            .await
            .unwrap();
        assert_same_bytes(&dest, copy);
    }
    let again = store.gc(2).await.unwrap();
    assert_eq!((again.manifests_deleted, again.chunks_deleted), (0, 0));
    assert!(matches!(
        store.gc(0).await.unwrap_err(),
        ChunkError::KeepNone
    ));
    rig.assert_no_markers().await;
}

/// The bytes of the two manifests of `a` the GC deleted, as their JSON is stored.
fn manifests_bytes_gone(a: &[(Manifest, PathBuf)]) -> u64 {
    a[..2]
        .iter()
        .map(|(m, _)| serde_json::to_vec(m).unwrap().len() as u64)
        .sum()
}

const VOLUMES: u64 = 3;
const GENERATIONS: u64 = 5;
const IMAGE_CHUNKS: u64 = 4;

async fn gc_running_with_uploads_never_deletes_a_named_chunk(rig: Rig) {
    // GCs back to back for as long as the uploads run; each sweep is announced, and an
    // upload task waits for the next sweep after each generation, so that sweeps and the
    // starts of uploads interleave rather than the uploads keeping every GC from sweeping.
    let uploading = Arc::new(AtomicBool::new(true));
    let (sweeps, swept) = watch::channel(0u64);
    let gc = {
        let (store, uploading) = (rig.reopen(), uploading.clone());
        tokio::spawn(async move {
            let mut rounds = Vec::new();
            while uploading.load(Ordering::Relaxed) || rounds.len() < 3 {
                let round = store.gc(2).await.unwrap();
                if !round.skipped_for_upload {
                    sweeps.send_modify(|n| *n += 1);
                }
                rounds.push(round);
            }
            rounds
        })
    };
    // Each volume's uploads in a task of its own, one generation after another, each
    // changing two of its chunks; a copy of every image is kept to check its restore.
    let mut uploads = Vec::new();
    for volume in 0..VOLUMES {
        let store = rig.reopen();
        let image = rig.path(&format!("v{volume}.img"));
        let copies = rig.path(&format!("v{volume}-generations"));
        uploads.push(tokio::spawn(upload_generations(
            store,
            volume,
            image,
            copies,
            swept.clone(),
        )));
    }
    let mut expected: BTreeMap<(String, u64), PathBuf> = BTreeMap::new();
    for upload in uploads {
        expected.extend(upload.await.unwrap());
    }
    uploading.store(false, Ordering::Relaxed);
    let rounds = gc.await.unwrap();
    let swept = rounds.iter().filter(|r| !r.skipped_for_upload).count();
    let deleted: u64 = rounds.iter().map(|r| r.chunks_deleted).sum();
    eprintln!(
        "{} GC rounds alongside the uploads, {swept} swept, {deleted} chunks deleted",
        rounds.len()
    );
    assert!(
        deleted > 0,
        "the GCs deleted the chunks of pruned generations"
    );

    let last = rig.store.gc(2).await.unwrap();
    assert!(!last.skipped_for_upload);
    let mut kept = Vec::new();
    for volume in 0..VOLUMES {
        let name = format!("v{volume}");
        let generations = rig.store.generations(&name).await.unwrap();
        assert_eq!(generations, [GENERATIONS - 1, GENERATIONS], "{name}");
        for generation in generations {
            let manifest = rig.store.manifest(&name, generation).await.unwrap();
            let dest = rig.path("restored");
            rig.store
                .restore(&manifest, &dest, &ignore_progress)
                .await
                .unwrap_or_else(|e| panic!("restore {name} generation {generation}: {e}"));
            assert_same_bytes(&dest, &expected[&(name.clone(), generation)]);
            kept.push(manifest);
        }
    }
    assert_eq!(stored(&rig).await, named(&kept), "no chunk is left unnamed");
    rig.assert_no_markers().await;
}

/// Uploads [`GENERATIONS`] generations of volume `v<volume>`, each on the previous one,
/// and after each waits for a GC sweep; a copy of each generation's image, in `copies`.
async fn upload_generations(
    store: ChunkStore,
    volume: u64,
    image: PathBuf,
    copies: PathBuf,
    mut swept: watch::Receiver<u64>,
) -> Vec<((String, u64), PathBuf)> {
    let name = format!("v{volume}");
    std::fs::create_dir(&copies).unwrap();
    sparse_image(
        &image,
        IMAGE_CHUNKS * CHUNK,
        &[(0, noise(volume, CHUNK / 2))],
    );
    let mut base: Option<Manifest> = None;
    let mut copies_made = Vec::new();
    for generation in 1..=GENERATIONS {
        for n in 0..2 {
            let chunk = (generation * 2 + n + volume) % IMAGE_CHUNKS;
            let seed = volume * 1000 + generation * 10 + n;
            patch_image(&image, chunk * CHUNK + 4096 * n, &noise(seed, 64 * 1024));
        }
        let copy = copies.join(generation.to_string());
        sparse_copy(&image, &copy);
        let up = store
            .upload(&name, generation, &image, base.as_ref(), &ignore_progress)
            .await
            .unwrap_or_else(|e| panic!("upload {name} generation {generation}: {e}"));
        base = Some(up.manifest);
        copies_made.push(((name.clone(), generation), copy));
        let seen = *swept.borrow_and_update();
        tokio::time::timeout(PATIENCE, swept.wait_for(|n| *n > seen))
            .await
            .expect("a GC sweeps after the upload")
            .expect("the GC loop runs until the uploads are done");
    }
    copies_made
}
